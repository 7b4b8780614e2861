// dedup on the GPU: radix sort (key, position), scan the run heads into ranks. The sorted
// positions are the ids grouped by unique key (ascending in each group: the sort is stable),
// which the gradient reduction reuses instead of sorting again. The sort covers only the key bits
// that differ: predicted from the last batch when a workspace is given (checked on the device,
// read back with the unique count, sorted again if short), else measured for long batches. When
// those bits fit in 32, 64-bit keys are sorted as their low 32 bits.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"
#include "dynemb/ops/step_workspace.hpp"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::as_stream;
using ops::cuda::blocks_for_threads;
using ops::cuda::kBlock;

// What one synchronization reads back. The words from kFirstBadOffset on start at all ones, the
// others at zero.
enum Status : int {
  kUnique,
  kFirstOffset,
  kLastOffset,
  kKeysOr,
  kFirstBadOffset,
  kKeysAnd,
  kStatusWords
};
constexpr int kZeroWords = kFirstBadOffset;

// 1 where sorted[i] starts a run of equal keys, else 0: scanned straight into the ranks.
template <class K>
struct HeadFlag {
  const K* sorted;
  __host__ __device__ uint32_t operator()(uint32_t i) const {
    return (i == 0 || sorted[i] != sorted[i - 1]) ? 1u : 0u;
  }
};

template <class K>
auto head_flags(const K* sorted) {
  return thrust::make_transform_iterator(thrust::counting_iterator<uint32_t>(0),
                                         HeadFlag<K>{sorted});
}

// The key a sorted key S stands for: itself, or (S narrower than K: the sort's keys were the low
// 32 bits) those bits under the bits every key shares, taken from the AND of all keys.
template <class K, class S>
__device__ __forceinline__ K full_key(S sorted_key, const unsigned long long* status) {
  if constexpr (sizeof(S) == sizeof(K)) {
    return sorted_key;
  } else {
    static_assert(sizeof(S) == 4 && sizeof(K) == 8);
    return static_cast<K>((status[kKeysAnd] & ~0xFFFFFFFFull) | sorted_key);
  }
}

// The rank scan's output: rank is the inclusive count of heads up to sorted entry i (its unique
// position is rank - 1). Writes the unique keys, where each group starts, the unique count, the
// inverse (or, with rank_of_key, each unique key's rank at its key: rank_of_key_kernel then reads
// the inverse in the ids' order) and, when bag_by_row is not null, the bag of each position in
// sorted order (bag_of: by position). No rank array is written and read back, no kernel of its
// own: thrust's tabulate output iterator calls it with each index and value the scan stores.
template <class K, class S>
struct ScatterByRank {
  const S* sorted;
  const uint32_t* positions;
  size_t n;
  const uint32_t* bag_of;
  K* unique_keys;
  uint32_t* inverse;
  uint32_t* row_begin;
  uint32_t* bag_by_row;
  unsigned long long* status;
  uint32_t* rank_of_key = nullptr;  // null: the inverse is scattered here
  uint32_t key_mask = 0;            // the sorted bits of a key, rank_of_key's index

  __device__ void operator()(ptrdiff_t index, uint32_t rank) const {
    const auto i = static_cast<size_t>(index);
    const uint32_t r = rank - 1;
    const bool reads_position = rank_of_key == nullptr || bag_by_row != nullptr;
    const uint32_t position = reads_position ? positions[i] : 0;
    if (rank_of_key == nullptr) inverse[position] = r;
    if (bag_by_row != nullptr) bag_by_row[i] = bag_of[position];
    if (i == 0 || sorted[i] != sorted[i - 1]) {
      unique_keys[r] = full_key<K>(sorted[i], status);
      row_begin[r] = static_cast<uint32_t>(i);
      if constexpr (sizeof(S) == 4) {
        if (rank_of_key != nullptr) rank_of_key[static_cast<uint32_t>(sorted[i]) & key_mask] = r;
      }
    }
    if (i + 1 == n) {
      row_begin[r + 1] = static_cast<uint32_t>(n);
      status[kUnique] = r + 1;
    }
  }
};

template <class K, class S>
auto scatter_by_rank(const ScatterByRank<K, S>& f) {
  return thrust::make_tabulate_output_iterator(f);
}

// inverse[i] = the rank of id i's key, from the ranks the scan left at each unique key's index
// (ScatterByRank::rank_of_key): the ids' keys and the inverse in the ids' order, one random read
// each, where the scan would scatter every id's rank to its position. Every index read was
// written by this batch's scan (the key's own group's head; keys with bits above the mask, in a
// batch the caller refuses or sorts again on more bits, share an index with a group of the
// batch), so nothing needs clearing.
__global__ void rank_of_key_kernel(const uint32_t* keys, size_t n, const uint32_t* rank_of_key,
                                   uint32_t key_mask, uint32_t* inverse) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  constexpr int kPerThread = 4;
  for (size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; first < n;
       first += stride * kPerThread) {
    uint32_t key[kPerThread], rank[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const size_t i = first + k * stride;
      key[k] = i < n ? __ldg(keys + i) & key_mask : 0;
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      rank[k] = first + k * stride < n ? __ldg(rank_of_key + key[k]) : 0;
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const size_t i = first + k * stride;
      if (i < n) inverse[i] = rank[k];
    }
  }
}

// The largest index space of rank_of_key: 2^kDenseRankMaxBits words, and at most 4 words an id
// or kDenseRankAnyBatch words (4 MB) whatever the batch.
constexpr int kDenseRankMaxBits = 26;
constexpr size_t kDenseRankAnyBatch = size_t{1} << 20;

// One pass over the batch (grid-stride): the offsets' first and last value and the first b with
// offsets[b] < offsets[b - 1]; when bag_of is not null, bag_of[i] = b for the ids i of each bag b
// (ids outside [0, n) are not written: the offsets are checked on the host afterwards); and, over
// keys[0, key_count), the OR and AND of every key's bit pattern (the bits where all keys agree
// need no radix pass); when narrow_keys is not null, each key's low 32 bits go there. Blocks are
// whole warps.
template <class K>
__global__ void batch_status_kernel(const int64_t* offsets, size_t num_bags, size_t n,
                                    uint32_t* bag_of, const K* keys, size_t key_count,
                                    uint32_t* narrow_keys, unsigned long long* status) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (num_bags > 0) {
    for (size_t b = first; b <= num_bags; b += stride) {
      const int64_t begin = offsets[b];
      if (b == 0) status[kFirstOffset] = static_cast<unsigned long long>(begin);
      if (b == num_bags) status[kLastOffset] = static_cast<unsigned long long>(begin);
      if (b >= 1 && begin < offsets[b - 1]) atomicMin(&status[kFirstBadOffset], b);
    }
  }
  if (bag_of != nullptr) {
    // One warp per bag at a time.
    for (size_t b = first / 32; b < num_bags; b += stride / 32) {
      ops::cuda::write_bag_of(offsets, b, n, bag_of);
    }
  }
  if (key_count == 0) return;
  unsigned long long any = 0, all = ~0ull;
  for (size_t i = first; i < key_count; i += stride) {
    const auto bits = static_cast<unsigned long long>(keys[i]);
    if (narrow_keys != nullptr) narrow_keys[i] = static_cast<uint32_t>(bits);
    any |= bits;
    all &= bits;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    any |= __shfl_xor_sync(0xFFFFFFFFu, any, offset);
    all &= __shfl_xor_sync(0xFFFFFFFFu, all, offset);
  }
  // The block's warps combined first: one pair of atomics per block, not per warp (thousands of
  // atomics on one word queue at L2).
  __shared__ unsigned long long warp_any[kBlock / 32], warp_all[kBlock / 32];
  const uint32_t warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) {
    warp_any[warp] = any;
    warp_all[warp] = all;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (uint32_t w = 1; w < blockDim.x / 32; ++w) {
    any |= warp_any[w];
    all &= warp_all[w];
  }
  atomicOr(&status[kKeysOr], any);
  atomicAnd(&status[kKeysAnd], all);
}

// Batches at least this long, when nothing predicts their key bits (no workspace, or its first
// batch), first read back the bits that differ and sort only those; shorter ones sort all bits
// (the read back would cost more than the passes it saves).
constexpr size_t kNarrowSortMin = size_t{1} << 18;

// One past the highest bit on which keys whose OR and AND are `any` and `all` differ (1 when they
// are all equal). Keys agree on every bit at or above it, so sorting the bits below gives the
// full order (for signed keys too: the sign bit is then equal for all).
template <class K>
int end_bit_for(unsigned long long any, unsigned long long all) {
  constexpr int kAll = static_cast<int>(sizeof(K) * 8);
  const unsigned long long differ = any ^ all;
  return differ == 0 ? 1 : kAll - __builtin_clzll(differ);
}

__global__ void counts_kernel(const uint32_t* row_begin, size_t u, uint32_t* counts) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < u) counts[r] = row_begin[r + 1] - row_begin[r];
}

// Throws what validate_lookup would for bad offsets (status read back).
void check_offsets_status(const char* where, const uint64_t* status, const int64_t* offsets,
                          size_t num_bags, size_t n) {
  if (num_bags == 0) return;
  const auto first = static_cast<int64_t>(status[kFirstOffset]);
  if (first != 0) throw_bad_first_offset(where, 0, first);
  if (status[kFirstBadOffset] != ULLONG_MAX) {
    const size_t b = status[kFirstBadOffset];
    int64_t pair[2];
    core::cuda::check(cudaMemcpy(pair, offsets + b - 1, sizeof pair, cudaMemcpyDeviceToHost),
                      "dedup: read bad offset");
    throw_decreasing_offset(where, 0, b, pair[1], pair[0]);
  }
  const auto last = static_cast<int64_t>(status[kLastOffset]);
  if (static_cast<size_t>(last) != n) throw_bad_last_offset(where, 0, num_bags, last, n);
}

// The sort, head flags, rank scan and scatter of one dedup call, on scratch from the workspace
// (kept between calls) or on stream-ordered temporaries. S is the type of the sort's keys: K, or
// the low 32 bits of 64-bit keys that agree above them.
template <class K, class S>
class SortPass {
 public:
  SortPass(StepWorkspace* workspace, cudaStream_t stream)
      : workspace_(workspace), stream_(stream) {}

  // Issues the passes over keys[0, n) sorting bits [0, end_bit); the unique count goes to
  // status[kUnique]. bag_by_row (null: not written) from bag_of (each id's bag). ids_by_row null:
  // the grouped ids are not written (with bag_by_row and the dense ranks, the sort then carries
  // each id's bag instead of its position, and the scan reads neither).
  void issue(size_t n, const S* keys, int end_bit, K* unique_keys, uint32_t* inverse,
             uint32_t* ids_by_row, uint32_t* row_begin, const uint32_t* bag_of,
             uint32_t* bag_by_row, unsigned long long* status) {
    const int items = static_cast<int>(n);
    size_t sort_bytes = 0, scan_bytes = 0;
    StepWorkspace::SortSizes* cached = workspace_ != nullptr ? &workspace_->sort_sizes : nullptr;
    if (cached != nullptr && cached->items == n && cached->end_bit == end_bit &&
        cached->key_bytes == sizeof(S)) {
      sort_bytes = cached->sort_bytes;
      scan_bytes = cached->scan_bytes;
    } else {
      S* no_keys = nullptr;
      core::cuda::check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, no_keys, inverse,
                                                        ids_by_row, items, 0, end_bit, stream_),
                        "dedup: SortPairs (size)");
      core::cuda::check(
          cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, head_flags<S>(no_keys),
                                        scatter_by_rank(ScatterByRank<K, S>{}), items, stream_),
          "dedup: InclusiveSum (size)");
      if (cached != nullptr) *cached = {n, end_bit, sizeof(S), sort_bytes, scan_bytes};
    }
    const size_t temp_bytes = std::max(sort_bytes, scan_bytes);
    // Narrow keys over a small enough index space: each unique key's rank written at its key and
    // the inverse read from there in the ids' order (rank_of_key_kernel), not scattered.
    const bool dense = sizeof(S) == 4 && workspace_ != nullptr && end_bit <= kDenseRankMaxBits &&
                       (size_t{1} << end_bit) <= std::max(4 * n, kDenseRankAnyBatch);
    // The bags sorted with the keys land in bag_by_row directly: no position read back, no bag
    // looked up at a random position in the scan.
    const bool bags_as_values =
        ids_by_row == nullptr && bag_of != nullptr && bag_by_row != nullptr && dense;
    S* sorted = nullptr;
    uint32_t* positions = nullptr;
    uint32_t* grouped = ids_by_row;  // the sorted positions (scratch when not asked for)
    uint32_t* rank_of_key = nullptr;
    void* temp = nullptr;
    const auto carve = [&](ScratchCarver& c) {
      sorted = c.take<S>(n);
      if (workspace_ == nullptr) positions = c.take<uint32_t>(n);
      if (ids_by_row == nullptr && !bags_as_values) grouped = c.take<uint32_t>(n);
      if (dense) rank_of_key = c.take<uint32_t>(size_t{1} << end_bit);
      temp = c.take<uint8_t>(temp_bytes);
    };
    ScratchCarver measure;
    carve(measure);
    void* block = nullptr;
    if (workspace_ != nullptr) {
      block = workspace_->scratch(measure.bytes(), stream_);
    } else {
      owned_ = core::cuda::DeviceArray<uint8_t>(measure.bytes(), stream_);
      block = owned_.data();
    }
    ScratchCarver place(block);
    carve(place);
    const uint32_t* positions_in = nullptr;
    if (bags_as_values) {
      // No position is sorted.
    } else if (workspace_ != nullptr) {
      positions_in = workspace_->iota(n, stream_);
    } else {
      ops::cuda::fill_iota(positions, n, stream_);
      positions_in = positions;
    }
    const uint32_t* values_in = bags_as_values ? bag_of : positions_in;
    uint32_t* values_out = bags_as_values ? bag_by_row : grouped;
    core::cuda::check(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys, sorted, values_in,
                                                      values_out, items, 0, end_bit, stream_),
                      "dedup: SortPairs");
    ScatterByRank<K, S> scatter{
        sorted,      grouped, n,         bag_of,
        unique_keys, inverse, row_begin, bags_as_values ? nullptr : bag_by_row,
        status};
    const uint32_t key_mask =
        end_bit >= 32 ? 0xFFFFFFFFu : static_cast<uint32_t>((uint64_t{1} << end_bit) - 1);
    if (dense) {
      scatter.rank_of_key = rank_of_key;
      scatter.key_mask = key_mask;
    }
    core::cuda::check(cub::DeviceScan::InclusiveSum(temp, scan_bytes, head_flags<S>(sorted),
                                                    scatter_by_rank(scatter), items, stream_),
                      "dedup: InclusiveSum (scatter)");
    if (dense) {
      if constexpr (sizeof(S) == 4) {
        rank_of_key_kernel<<<blocks_for_threads((n + 3) / 4), kBlock, 0, stream_>>>(
            keys, n, rank_of_key, key_mask, inverse);
        core::cuda::check_launch("dedup: rank_of_key_kernel");
      }
    }
  }

 private:
  StepWorkspace* workspace_;
  cudaStream_t stream_;
  core::cuda::DeviceArray<uint8_t> owned_;
};

// Copies `count` words to the host on `stream` (asynchronous into pinned memory).
void read_back(uint64_t* host, const void* device, size_t count, cudaStream_t stream,
               const char* what) {
  core::cuda::check(
      cudaMemcpyAsync(host, device, count * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream),
      what);
}

}  // namespace

template <TableKey K>
size_t dedup_grouped_cuda(size_t n, const K* keys, K* unique_keys, uint32_t* inverse,
                          uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                          const int64_t* offsets, size_t num_bags, const char* where,
                          ReadAlong along, StepWorkspace* workspace, StreamHandle stream_handle) {
  constexpr int kAll = static_cast<int>(sizeof(K) * 8);
  const cudaStream_t stream = as_stream(stream_handle);
  require(along.count + kStatusWords <= StepWorkspace::kHostWords, where, "along.count",
          std::to_string(along.count),
          "must be <= " + std::to_string(StepWorkspace::kHostWords - kStatusWords));
  require(bag_by_row == nullptr || workspace != nullptr, where, "bag_by_row", "not null",
          "needs a StepWorkspace (the ids' bags are written to its scratch first)");
  ops::cuda::keep_pool_memory(stream);
  // The status words and the host words they are read into: the workspace's, else temporaries
  // (pageable host memory).
  core::cuda::DeviceArray<unsigned long long> own_status;
  unsigned long long* status = nullptr;
  uint64_t own_host[StepWorkspace::kHostWords];
  uint64_t* host = own_host;
  if (workspace != nullptr) {
    status = reinterpret_cast<unsigned long long*>(workspace->device_words());
    host = workspace->host_words();
  } else {
    own_status = core::cuda::DeviceArray<unsigned long long>(kStatusWords, stream);
    status = own_status.data();
  }
  core::cuda::check(cudaMemsetAsync(status, 0, kZeroWords * sizeof(unsigned long long), stream),
                    "dedup: cudaMemsetAsync");
  core::cuda::check(
      cudaMemsetAsync(status + kZeroWords, 0xFF,
                      (kStatusWords - kZeroWords) * sizeof(unsigned long long), stream),
      "dedup: cudaMemsetAsync");
  // The key bits are measured when a workspace will predict the next batch's from them, or when
  // this batch is long enough to sort narrowly.
  const int predicted = workspace != nullptr ? workspace->sort_end_bit : 0;
  const bool measure_bits = n > 0 && (workspace != nullptr || n >= kNarrowSortMin);
  const size_t items = std::max(num_bags + 1, measure_bits ? n : size_t{0});
  // Each id's bag, for bag_by_row: written by the status pass (no launch of its own).
  if (num_bags == 0) bag_by_row = nullptr;
  uint32_t* bag_of = bag_by_row != nullptr ? workspace->bag_of(n, stream) : nullptr;
  // 64-bit keys whose differing bits may fit in 32 (predicted so, or about to be measured) get
  // their low 32 bits written by the status pass, for a sort that moves half the key bytes.
  const bool may_narrow =
      sizeof(K) == 8 && measure_bits && (predicted > 0 ? predicted <= 32 : n >= kNarrowSortMin);
  core::cuda::DeviceArray<uint32_t> own_narrow;
  uint32_t* narrow = nullptr;
  if (may_narrow && workspace != nullptr) {
    narrow = workspace->narrow_keys(n, stream);
  } else if (may_narrow) {
    own_narrow = core::cuda::DeviceArray<uint32_t>(n, stream);
    narrow = own_narrow.data();
  }
  if (num_bags > 0 || measure_bits) {
    const unsigned blocks =
        static_cast<unsigned>(std::min<size_t>(blocks_for_threads(items), 1024));
    batch_status_kernel<<<blocks, kBlock, 0, stream>>>(offsets, num_bags, n, bag_of, keys,
                                                       measure_bits ? n : 0, narrow, status);
    core::cuda::check_launch("dedup: batch_status_kernel");
  }
  if (n == 0) {
    core::cuda::check(cudaMemsetAsync(row_begin, 0, sizeof(uint32_t), stream),
                      "dedup: cudaMemsetAsync");
  }
  // The sort's end bit: the workspace's prediction (checked below), else for a long batch its own
  // bits (one more read back), else all bits.
  int end_bit = kAll;
  if (predicted > 0) {
    end_bit = predicted;
  } else if (n >= kNarrowSortMin) {
    read_back(host, status, kStatusWords, stream, "dedup: read key bits");
    core::cuda::sync(stream, "dedup: key bits");
    end_bit = end_bit_for<K>(host[kKeysOr], host[kKeysAnd]);
  }
  // Sorts on bits [0, bits): the narrow keys when they hold those bits, else the keys.
  const auto sort = [&](int bits) {
    if (narrow != nullptr && bits <= 32) {
      SortPass<K, uint32_t>(workspace, stream)
          .issue(n, narrow, bits, unique_keys, inverse, ids_by_row, row_begin, bag_of, bag_by_row,
                 status);
    } else {
      SortPass<K, K>(workspace, stream)
          .issue(n, keys, bits, unique_keys, inverse, ids_by_row, row_begin, bag_of, bag_by_row,
                 status);
    }
  };
  if (n > 0) sort(end_bit);
  read_back(host, status, kStatusWords, stream, "dedup: read status");
  if (along.count > 0)
    read_back(host + kStatusWords, along.counters, along.count, stream, "dedup: read along");
  core::cuda::sync(stream, "dedup");
  if (along.count > 0) std::copy_n(host + kStatusWords, along.count, along.host);
  check_offsets_status(where, host, offsets, num_bags, n);
  size_t unique = static_cast<size_t>(host[kUnique]);
  if (measure_bits) {
    const int needed = end_bit_for<K>(host[kKeysOr], host[kKeysAnd]);
    if (workspace != nullptr) workspace->sort_end_bit = needed;
    if (needed > end_bit) {
      // The prediction was short: sort again on the bits this batch needs (rare: the keys' range
      // grew).
      sort(needed);
      read_back(host, status, 1, stream, "dedup: read unique count");
      core::cuda::sync(stream, "dedup");
      unique = static_cast<size_t>(host[kUnique]);
    }
  }
  return unique;
}

void dedup_grouped_async_cuda(size_t n, const uint64_t* keys, uint64_t* unique_keys,
                              uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                              uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                              int end_bit, uint64_t* unique_count, StepWorkspace& workspace,
                              StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  // keys = nullptr: the narrow keys and the bags are already in the workspace, and no key has bits
  // above 32 (a batch that has is refused by the caller): the AND's high half is 0.
  const bool prepared = keys == nullptr;
  auto* status = reinterpret_cast<unsigned long long*>(workspace.device_words());
  core::cuda::check(
      cudaMemsetAsync(status, 0,
                      (prepared ? kStatusWords : kZeroWords) * sizeof(unsigned long long), stream),
      "dedup_async: cudaMemsetAsync");
  if (!prepared) {
    core::cuda::check(
        cudaMemsetAsync(status + kZeroWords, 0xFF,
                        (kStatusWords - kZeroWords) * sizeof(unsigned long long), stream),
        "dedup_async: cudaMemsetAsync");
  }
  if (num_bags == 0) bag_by_row = nullptr;
  uint32_t* bag_of = bag_by_row != nullptr ? workspace.bag_of(n, stream) : nullptr;
  // Keys that agree above bit 32 (as the caller's end bit says) are sorted as their low 32 bits.
  uint32_t* narrow = n > 0 && end_bit <= 32 ? workspace.narrow_keys(n, stream) : nullptr;
  if (!prepared && (n > 0 || num_bags > 0)) {
    const size_t items = std::max(num_bags + 1, n);
    const unsigned blocks =
        static_cast<unsigned>(std::min<size_t>(blocks_for_threads(items), 1024));
    batch_status_kernel<<<blocks, kBlock, 0, stream>>>(offsets, num_bags, n, bag_of, keys, n,
                                                       narrow, status);
    core::cuda::check_launch("dedup_async: batch_status_kernel");
  }
  if (n == 0) {
    core::cuda::check(cudaMemsetAsync(row_begin, 0, sizeof(uint32_t), stream),
                      "dedup_async: cudaMemsetAsync");
  } else if (narrow != nullptr) {
    SortPass<uint64_t, uint32_t>(&workspace, stream)
        .issue(n, narrow, end_bit, unique_keys, inverse, ids_by_row, row_begin, bag_of, bag_by_row,
               status);
  } else {
    SortPass<uint64_t, uint64_t>(&workspace, stream)
        .issue(n, keys, end_bit, unique_keys, inverse, ids_by_row, row_begin, bag_of, bag_by_row,
               status);
  }
  core::cuda::check(cudaMemcpyAsync(unique_count, status + kUnique, sizeof(uint64_t),
                                    cudaMemcpyDeviceToDevice, stream),
                    "dedup_async: copy unique count");
}

template <TableKey K>
size_t dedup_cuda(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts,
                  StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  ops::cuda::keep_pool_memory(stream);
  core::cuda::DeviceArray<uint32_t> ids_by_row(n, stream), row_begin(n + 1, stream);
  const size_t u =
      dedup_grouped_cuda(n, keys, unique_keys, inverse, ids_by_row.data(), row_begin.data(),
                         nullptr, nullptr, 0, "dedup", {}, nullptr, stream_handle);
  if (counts != nullptr && u > 0) {
    counts_kernel<<<blocks_for_threads(u), kBlock, 0, stream>>>(row_begin.data(), u, counts);
    core::cuda::check_launch("dedup: counts_kernel");
  }
  return u;
}

template size_t dedup_cuda<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                                    StreamHandle);
template size_t dedup_cuda<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*, uint32_t*,
                                     StreamHandle);
template size_t dedup_grouped_cuda<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                                            uint32_t*, uint32_t*, const int64_t*, size_t,
                                            const char*, ReadAlong, StepWorkspace*, StreamHandle);
template size_t dedup_grouped_cuda<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*,
                                             uint32_t*, uint32_t*, uint32_t*, const int64_t*,
                                             size_t, const char*, ReadAlong, StepWorkspace*,
                                             StreamHandle);

}  // namespace dynemb::ops::detail

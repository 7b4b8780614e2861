// dedup on the GPU: radix sort (key, position), mark run heads, scan them into ranks. The sorted
// positions are the ids grouped by unique key (ascending in each group: the sort is stable),
// which the gradient reduction reuses instead of sorting again.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>

#include "core/cuda/check.hpp"
#include "core/cuda/device_array.hpp"
#include "ops/backends.hpp"
#include "ops/cuda/launch.cuh"

namespace dynemb::detail {
namespace {

using ops_cuda::as_stream;
using ops_cuda::blocks_for_threads;
using ops_cuda::kBlock;

// What one synchronization reads back.
enum Status : int { kUnique, kFirstBadOffset, kFirstOffset, kLastOffset, kStatusWords };

template <class K>
__global__ void head_flags_kernel(const K* sorted, size_t n, uint32_t* heads) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) heads[i] = (i == 0 || sorted[i] != sorted[i - 1]) ? 1u : 0u;
}

// rank[i] is the inclusive count of heads: the unique position of sorted[i] is rank[i] - 1.
// Writes the inverse, the unique keys, where each group starts, and the unique count.
template <class K>
__global__ void scatter_kernel(const K* sorted, const uint32_t* positions, const uint32_t* rank,
                               size_t n, K* unique_keys, uint32_t* inverse, uint32_t* row_begin,
                               unsigned long long* status) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t r = rank[i] - 1;
  inverse[positions[i]] = r;
  if (i == 0 || sorted[i] != sorted[i - 1]) {
    unique_keys[r] = sorted[i];
    row_begin[r] = static_cast<uint32_t>(i);
  }
  if (i + 1 == n) {
    row_begin[r + 1] = static_cast<uint32_t>(n);
    status[kUnique] = r + 1;
  }
}

// The offsets' first and last value, and the first b with offsets[b] < offsets[b - 1].
__global__ void offsets_status_kernel(const int64_t* offsets, size_t num_bags,
                                      unsigned long long* status) {
  const size_t b = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b > num_bags) return;
  if (b == 0) status[kFirstOffset] = static_cast<unsigned long long>(offsets[0]);
  if (b == num_bags) status[kLastOffset] = static_cast<unsigned long long>(offsets[num_bags]);
  if (b >= 1 && offsets[b] < offsets[b - 1]) atomicMin(&status[kFirstBadOffset], b);
}

// OR and AND of every key's bit pattern (words[0] |=, words[1] &=): the bits where all keys
// agree need no radix pass.
template <class K>
__global__ void bit_agreement_kernel(const K* keys, size_t n, unsigned long long* words) {
  unsigned long long any = 0, all = ~0ull;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const auto bits = static_cast<unsigned long long>(keys[i]);
    any |= bits;
    all &= bits;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    any |= __shfl_xor_sync(0xFFFFFFFFu, any, offset);
    all &= __shfl_xor_sync(0xFFFFFFFFu, all, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicOr(&words[0], any);
    atomicAnd(&words[1], all);
  }
}

// Batches at least this long first find the key bits that differ (one small kernel and a read
// back) and sort only those; shorter ones sort all bits (the read back would cost more).
constexpr size_t kNarrowSortMin = size_t{1} << 18;

// The end bit of the radix sort of keys[0, n): one past the highest bit on which keys differ.
// Keys agree on every bit at or above it, so sorting the bits below gives the full order (for
// signed keys too: the sign bit is then equal for all).
template <class K>
int sort_end_bit(const K* keys, size_t n, cudaStream_t stream) {
  constexpr int kAll = static_cast<int>(sizeof(K) * 8);
  if (n < kNarrowSortMin) return kAll;
  cuda::DeviceArray<unsigned long long> words(2, stream);
  cuda::check(cudaMemsetAsync(words.data(), 0, sizeof(unsigned long long), stream),
              "dedup: cudaMemsetAsync");
  cuda::check(cudaMemsetAsync(words.data() + 1, 0xFF, sizeof(unsigned long long), stream),
              "dedup: cudaMemsetAsync");
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>(blocks_for_threads(n), 1024));
  bit_agreement_kernel<<<blocks, kBlock, 0, stream>>>(keys, n, words.data());
  cuda::check_launch("dedup: bit_agreement_kernel");
  unsigned long long host[2];
  cuda::check(cudaMemcpyAsync(host, words.data(), sizeof host, cudaMemcpyDeviceToHost, stream),
              "dedup: read key bits");
  cuda::sync(stream, "dedup: key bits");
  const unsigned long long differ = host[0] ^ host[1];
  return differ == 0 ? 1 : kAll - __builtin_clzll(differ);
}

__global__ void counts_kernel(const uint32_t* row_begin, size_t u, uint32_t* counts) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < u) counts[r] = row_begin[r + 1] - row_begin[r];
}

// Throws what validate_lookup would for bad offsets (status read back).
void check_offsets_status(const char* where, const unsigned long long* status,
                          const int64_t* offsets, size_t num_bags, size_t n) {
  if (num_bags == 0) return;
  const auto first = static_cast<int64_t>(status[kFirstOffset]);
  if (first != 0) throw_bad_first_offset(where, 0, first);
  if (status[kFirstBadOffset] != ULLONG_MAX) {
    const size_t b = status[kFirstBadOffset];
    int64_t pair[2];
    cuda::check(cudaMemcpy(pair, offsets + b - 1, sizeof pair, cudaMemcpyDeviceToHost),
                "dedup: read bad offset");
    throw_decreasing_offset(where, 0, b, pair[1], pair[0]);
  }
  const auto last = static_cast<int64_t>(status[kLastOffset]);
  if (static_cast<size_t>(last) != n) throw_bad_last_offset(where, 0, num_bags, last, n);
}

}  // namespace

template <TableKey K>
size_t dedup_grouped_cuda(size_t n, const K* keys, K* unique_keys, uint32_t* inverse,
                          uint32_t* ids_by_row, uint32_t* row_begin, const int64_t* offsets,
                          size_t num_bags, const char* where, ReadAlong along,
                          StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  ops_cuda::keep_pool_memory(stream);
  cuda::DeviceArray<unsigned long long> status(kStatusWords, stream);
  cuda::check(cudaMemsetAsync(status.data(), 0, kStatusWords * sizeof(unsigned long long), stream),
              "dedup: cudaMemsetAsync");
  cuda::check(
      cudaMemsetAsync(status.data() + kFirstBadOffset, 0xFF, sizeof(unsigned long long), stream),
      "dedup: cudaMemsetAsync");
  if (num_bags > 0) {
    offsets_status_kernel<<<blocks_for_threads(num_bags + 1), kBlock, 0, stream>>>(
        offsets, num_bags, status.data());
    cuda::check_launch("dedup: offsets_status_kernel");
  }
  if (n == 0) {
    cuda::check(cudaMemsetAsync(row_begin, 0, sizeof(uint32_t), stream), "dedup: cudaMemsetAsync");
  } else {
    // One temporary block: sorted keys, the iota, the ranks and the CUB scratch.
    cuda::DeviceArray<K> sorted(n, stream);
    cuda::DeviceArray<uint32_t> positions_in(n, stream), rank(n, stream);
    ops_cuda::fill_iota(positions_in.data(), n, stream);
    size_t sort_bytes = 0, scan_bytes = 0;
    const int num_items = static_cast<int>(n);
    const int end_bit = sort_end_bit(keys, n, stream);
    cuda::check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, sorted.data(),
                                                positions_in.data(), ids_by_row, num_items, 0,
                                                end_bit, stream),
                "dedup: SortPairs (size)");
    cuda::check(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, rank.data(), rank.data(),
                                              num_items, stream),
                "dedup: InclusiveSum (size)");
    cuda::DeviceArray<uint8_t> temp(std::max(sort_bytes, scan_bytes), stream);
    cuda::check(cub::DeviceRadixSort::SortPairs(temp.data(), sort_bytes, keys, sorted.data(),
                                                positions_in.data(), ids_by_row, num_items, 0,
                                                end_bit, stream),
                "dedup: SortPairs");
    head_flags_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(sorted.data(), n, rank.data());
    cuda::check_launch("dedup: head_flags_kernel");
    cuda::check(cub::DeviceScan::InclusiveSum(temp.data(), scan_bytes, rank.data(), rank.data(),
                                              num_items, stream),
                "dedup: InclusiveSum");
    scatter_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(
        sorted.data(), ids_by_row, rank.data(), n, unique_keys, inverse, row_begin, status.data());
    cuda::check_launch("dedup: scatter_kernel");
  }
  unsigned long long host[kStatusWords];
  cuda::check(cudaMemcpyAsync(host, status.data(), sizeof host, cudaMemcpyDeviceToHost, stream),
              "dedup: read status");
  if (along.count > 0) {
    cuda::check(cudaMemcpyAsync(along.host, along.counters, along.count * sizeof(uint64_t),
                                cudaMemcpyDeviceToHost, stream),
                "dedup: read along");
  }
  cuda::sync(stream, "dedup");
  check_offsets_status(where, host, offsets, num_bags, n);
  return static_cast<size_t>(host[kUnique]);
}

template <TableKey K>
size_t dedup_cuda(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts,
                  StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  ops_cuda::keep_pool_memory(stream);
  cuda::DeviceArray<uint32_t> ids_by_row(n, stream), row_begin(n + 1, stream);
  const size_t u = dedup_grouped_cuda(n, keys, unique_keys, inverse, ids_by_row.data(),
                                      row_begin.data(), nullptr, 0, "dedup", {}, stream_handle);
  if (counts != nullptr && u > 0) {
    counts_kernel<<<blocks_for_threads(u), kBlock, 0, stream>>>(row_begin.data(), u, counts);
    cuda::check_launch("dedup: counts_kernel");
  }
  return u;
}

template size_t dedup_cuda<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                                    StreamHandle);
template size_t dedup_cuda<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*, uint32_t*,
                                     StreamHandle);
template size_t dedup_grouped_cuda<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                                            uint32_t*, const int64_t*, size_t, const char*,
                                            ReadAlong, StreamHandle);
template size_t dedup_grouped_cuda<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*,
                                             uint32_t*, uint32_t*, const int64_t*, size_t,
                                             const char*, ReadAlong, StreamHandle);

}  // namespace dynemb::detail

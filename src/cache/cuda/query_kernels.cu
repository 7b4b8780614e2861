// The query kernels (one warp per key, no lock: a per-set version check around each read) and the
// compaction of their misses into batch order: fused into the query for batches up to
// kFusedMaxKeys (one launch), a separate compaction for larger ones.
#include <thrust/iterator/counting_iterator.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_select.cuh>

#include "cuda/device_view.cuh"
#include "cuda/kernels.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"

namespace dynemb::cache::detail {
namespace {

constexpr int kBlockThreads = 256;
constexpr int kWarpsPerBlock = kBlockThreads / kWarp;
// The fused query's block scans kFusedItems miss flags per thread (kMaxFusedTile keys a tile).
constexpr uint32_t kFusedItems = kMaxFusedTile / kBlockThreads;
static_assert(kFusedItems * kBlockThreads == kMaxFusedTile);

// Reads key's row from `set` into out when the set holds it, and stamps the slot; false when the
// set does not hold the key. Lock-free: the row is read between two reads of the set's version
// and kept only if the version did not change (a writer in between makes the warp read again).
// C > 0: the row is staged in C registers per lane (float4 ones when V4) and written to out only
// after the check, so out is untouched on a miss. C == 0 (rows over 1024 floats): the row is
// copied straight to out and copied again on a retry.
template <class K, int R, int C, bool V4>
__device__ bool read_from_set(const CacheView<K>& c, uint64_t set, K key, int lane, float* out,
                              unsigned long long stamp) {
  uint32_t* version = c.versions + set;
  const K* set_keys = c.keys + set * c.ways;
  for (;;) {
    uint32_t before = 0;
    if (lane == 0) before = version_ref(version).load(::cuda::memory_order_acquire);
    __syncwarp();
    before = __shfl_sync(kFullMask, before, 0);
    if ((before & 1u) != 0) {
      __nanosleep(64);
      continue;
    }
    const int way = find_in_set<R>(set_keys, key, lane);
    if (way < 0) return false;
    const uint64_t slot = set * c.ways + static_cast<uint64_t>(way);
    const float* row = c.values + slot * c.dim;
    [[maybe_unused]] float4 staged4[C > 0 ? C : 1];
    [[maybe_unused]] float staged[C > 0 ? C : 1];
    if constexpr (C > 0 && V4) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim / 4) staged4[k] = __ldcg(reinterpret_cast<const float4*>(row) + e);
      }
    } else if constexpr (C > 0) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim) staged[k] = __ldcg(row + e);
      }
    } else {
      for (uint32_t e = lane; e < c.dim; e += kWarp) out[e] = __ldcg(row + e);
    }
    // The row's loads complete before the version is read again.
    ::cuda::atomic_thread_fence(::cuda::memory_order_acquire, ::cuda::thread_scope_device);
    __syncwarp();
    uint32_t after = 0;
    if (lane == 0) after = version_ref(version).load(::cuda::memory_order_relaxed);
    after = __shfl_sync(kFullMask, after, 0);
    if (after != before) continue;
    if constexpr (C > 0 && V4) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim / 4) reinterpret_cast<float4*>(out)[e] = staged4[k];
      }
    } else if constexpr (C > 0) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim) out[e] = staged[k];
      }
    }
    if (lane == 0) touch_stamp(c.stamps + slot, stamp);
    return true;
  }
}

template <class K, int R, int C, bool V4>
__global__ void __launch_bounds__(kBlockThreads)
    query_kernel(CacheView<K> c, size_t n, const K* __restrict__ keys, float* values,
                 uint8_t* __restrict__ missed, unsigned long long stamp) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const size_t warps = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  unsigned long long sentinels = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; i < n;
       i += warps) {
    const K key = keys[i];
    bool hit = false;
    if (key == c.empty_key) {
      ++sentinels;
    } else {
      const CandidateSets sets = candidate_sets(cache_key_bits(key), c.num_sets);
      float* out = values + i * c.dim;
      hit = read_from_set<K, R, C, V4>(c, sets.first, key, lane, out, stamp) ||
            read_from_set<K, R, C, V4>(c, sets.second, key, lane, out, stamp);
    }
    if (lane == 0) missed[i] = hit ? 0 : 1;
  }
  if (lane == 0) add_count(&c.counters->sentinel_keys, sentinels);
}

// Queries the keys of one tile per block (tiles of `tile` consecutive keys, one warp per key),
// then writes the tile's misses in batch order: the block counts its misses, publishes the count
// in status[block] (count, then the call's tag with release), adds up the counts the blocks
// before it published (waiting for each one's tag) and writes its misses after theirs. The last
// block writes *miss_count and the counters. status needs no initialization: a slot counts only
// once it holds this call's tag (a 64-bit value drawn per call). Blocks wait only on blocks of
// lower index, which are dispatched first, so the wait ends even when not all blocks fit at once.
template <class K, int R, int C, bool V4>
__global__ void __launch_bounds__(kBlockThreads)
    query_fused_kernel(CacheView<K> c, size_t n, uint32_t tile, const K* __restrict__ keys,
                       float* values, K* __restrict__ missing_keys,
                       uint64_t* __restrict__ missing_positions, uint64_t* miss_count,
                       TileStatus* status, unsigned long long tag, unsigned long long stamp) {
  using Scan = cub::BlockScan<uint32_t, kBlockThreads>;
  using Reduce = cub::BlockReduce<unsigned long long, kBlockThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } scratch;
  __shared__ uint8_t missed[kMaxFusedTile];
  __shared__ unsigned long long misses_before;
  const size_t first = static_cast<size_t>(blockIdx.x) * tile;
  const uint32_t count = static_cast<uint32_t>(n - first < tile ? n - first : tile);
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  unsigned long long sentinels = 0;
  for (uint32_t j = threadIdx.x / kWarp; j < count; j += kWarpsPerBlock) {
    const K key = keys[first + j];
    bool hit = false;
    if (key == c.empty_key) {
      ++sentinels;
    } else {
      const CandidateSets sets = candidate_sets(cache_key_bits(key), c.num_sets);
      float* out = values + (first + j) * c.dim;
      hit = read_from_set<K, R, C, V4>(c, sets.first, key, lane, out, stamp) ||
            read_from_set<K, R, C, V4>(c, sets.second, key, lane, out, stamp);
    }
    if (lane == 0) missed[j] = hit ? 0 : 1;
  }
  if (lane == 0) add_count(&c.counters->sentinel_keys, sentinels);
  __syncthreads();

  uint32_t flags[kFusedItems];
  uint32_t mine = 0;
#pragma unroll
  for (uint32_t k = 0; k < kFusedItems; ++k) {
    const uint32_t j = threadIdx.x * kFusedItems + k;
    flags[k] = j < count ? missed[j] : 0u;
    mine += flags[k];
  }
  uint32_t offset = 0;
  uint32_t block_misses = 0;
  Scan(scratch.scan).ExclusiveSum(mine, offset, block_misses);
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(status[blockIdx.x].count)
        .store(block_misses, ::cuda::memory_order_relaxed);
    ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(status[blockIdx.x].tag)
        .store(tag, ::cuda::memory_order_release);
  }
  __syncthreads();  // the scan's shared memory is reused by the reduction

  unsigned long long before = 0;
  for (uint32_t t = threadIdx.x; t < blockIdx.x; t += kBlockThreads) {
    ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> published(status[t].tag);
    while (published.load(::cuda::memory_order_acquire) != tag) __nanosleep(32);
    before += ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(status[t].count)
                  .load(::cuda::memory_order_relaxed);
  }
  before = Reduce(scratch.reduce).Sum(before);
  if (threadIdx.x == 0) misses_before = before;
  __syncthreads();

  uint64_t at = misses_before + offset;
#pragma unroll
  for (uint32_t k = 0; k < kFusedItems; ++k) {
    if (flags[k] == 0) continue;
    const size_t i = first + threadIdx.x * kFusedItems + k;
    missing_keys[at] = keys[i];
    missing_positions[at] = i;
    ++at;
  }
  if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1) {
    const unsigned long long total = misses_before + block_misses;
    *miss_count = total;
    add_count(&c.counters->misses, total);
    add_count(&c.counters->hits, n - total);
  }
}

// Launches the unfused query kernel of one shape.
template <class K, int R, int C, bool V4>
struct LaunchUnfused {
  static void run(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
    const size_t blocks =
        std::min<size_t>((q.n + kWarpsPerBlock - 1) / kWarpsPerBlock, q.grid_limit);
    query_kernel<K, R, C, V4><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
        c, q.n, q.keys, q.values, q.missed, q.stamp);
    dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache::query: query_kernel launch");
  }
};

// Launches the fused query kernel of one shape (call.tile keys per block).
template <class K, int R, int C, bool V4>
struct LaunchFused {
  static void run(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
    const uint64_t blocks = fused_query_blocks(q.n, q.tile);
    query_fused_kernel<K, R, C, V4><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
        c, q.n, q.tile, q.keys, q.values, q.missing_keys, q.missing_positions, q.miss_count,
        q.status, q.tag, q.stamp);
    dynemb::core::cuda::check(cudaGetLastError(),
                              "EmbeddingCache::query: query_fused_kernel launch");
  }
};

// Picks the row staging for the dim (float4 registers when rows and output are 16-byte aligned)
// and runs Launch<K, R, C, V4>.
template <template <class, int, int, bool> class Launch, class K, int R>
void dispatch_dim(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
  const bool vec4 = c.dim % 4 == 0 && reinterpret_cast<uintptr_t>(q.values) % 16 == 0;
  if (vec4 && c.dim <= 128) {
    Launch<K, R, 1, true>::run(c, q, stream);
  } else if (vec4 && c.dim <= 256) {
    Launch<K, R, 2, true>::run(c, q, stream);
  } else if (vec4 && c.dim <= 1024) {
    Launch<K, R, 8, true>::run(c, q, stream);
  } else if (c.dim <= 32) {
    Launch<K, R, 1, false>::run(c, q, stream);
  } else if (c.dim <= 128) {
    Launch<K, R, 4, false>::run(c, q, stream);
  } else if (c.dim <= 1024) {
    Launch<K, R, 32, false>::run(c, q, stream);
  } else {
    Launch<K, R, 0, false>::run(c, q, stream);
  }
}

template <template <class, int, int, bool> class Launch, class K>
void dispatch_ways(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
  switch (c.ways) {
    case 32:
      return dispatch_dim<Launch, K, 1>(c, q, stream);
    case 64:
      return dispatch_dim<Launch, K, 2>(c, q, stream);
    default:
      return dispatch_dim<Launch, K, 4>(c, q, stream);
  }
}

// After a device-wide selection of the positions: the keys at those positions, and the counts.
template <class K>
__global__ void gather_missing_kernel(size_t n, const K* keys, const uint64_t* positions,
                                      const uint64_t* miss_count, K* missing_keys,
                                      DeviceCounters* counters) {
  const uint64_t m = *miss_count;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t k = tid; k < m; k += stride) missing_keys[k] = keys[positions[k]];
  if (tid == 0) {
    add_count(&counters->misses, m);
    add_count(&counters->hits, n - m);
  }
}

__global__ void scatter_rows_kernel(size_t n, const uint64_t* positions, const float* rows,
                                    uint32_t dim, float* out) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const size_t warps = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; i < n;
       i += warps) {
    float* dst = out + positions[i] * dim;
    const float* src = rows + i * dim;
    for (uint32_t e = lane; e < dim; e += kWarp) dst[e] = src[e];
  }
}

}  // namespace

template <class K>
void launch_query(const CacheView<K>& view, const QueryCall<K>& call, cudaStream_t stream) {
  if (call.n == 0) return;
  if (call.status != nullptr) {
    dispatch_ways<LaunchFused, K>(view, call, stream);
  } else {
    dispatch_ways<LaunchUnfused, K>(view, call, stream);
  }
}

template <class K>
void launch_compact_misses(const CacheView<K>& view, size_t n, const K* keys, const uint8_t* missed,
                           K* missing_keys, uint64_t* missing_positions, uint64_t* miss_count,
                           cudaStream_t stream) {
  thrust::counting_iterator<uint64_t> positions(0);
  size_t temp_bytes = 0;
  dynemb::core::cuda::check(
      cub::DeviceSelect::Flagged(nullptr, temp_bytes, positions, missed, missing_positions,
                                 miss_count, static_cast<int64_t>(n), stream),
      "EmbeddingCache::query: cub::DeviceSelect::Flagged (size)");
  const dynemb::core::cuda::DeviceArray<uint8_t> temp(temp_bytes, stream);
  dynemb::core::cuda::check(
      cub::DeviceSelect::Flagged(temp.data(), temp_bytes, positions, missed, missing_positions,
                                 miss_count, static_cast<int64_t>(n), stream),
      "EmbeddingCache::query: cub::DeviceSelect::Flagged");
  const size_t blocks = std::min<size_t>((n + kBlockThreads - 1) / kBlockThreads, 4096);
  gather_missing_kernel<K><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
      n, keys, missing_positions, miss_count, missing_keys, view.counters);
  dynemb::core::cuda::check(cudaGetLastError(),
                            "EmbeddingCache::query: gather_missing_kernel launch");
}

void launch_scatter_rows(size_t n, const uint64_t* positions, const float* rows, uint32_t dim,
                         float* out, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks = std::min<size_t>((n + kWarpsPerBlock - 1) / kWarpsPerBlock, 8192);
  scatter_rows_kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(n, positions,
                                                                                   rows, dim, out);
  dynemb::core::cuda::check(cudaGetLastError(), "scatter_rows_kernel launch");
}

template void launch_query<int32_t>(const CacheView<int32_t>&, const QueryCall<int32_t>&,
                                    cudaStream_t);
template void launch_compact_misses<int32_t>(const CacheView<int32_t>&, size_t, const int32_t*,
                                             const uint8_t*, int32_t*, uint64_t*, uint64_t*,
                                             cudaStream_t);
template void launch_query<int64_t>(const CacheView<int64_t>&, const QueryCall<int64_t>&,
                                    cudaStream_t);
template void launch_compact_misses<int64_t>(const CacheView<int64_t>&, size_t, const int64_t*,
                                             const uint8_t*, int64_t*, uint64_t*, uint64_t*,
                                             cudaStream_t);
template void launch_query<uint64_t>(const CacheView<uint64_t>&, const QueryCall<uint64_t>&,
                                     cudaStream_t);
template void launch_compact_misses<uint64_t>(const CacheView<uint64_t>&, size_t, const uint64_t*,
                                              const uint8_t*, uint64_t*, uint64_t*, uint64_t*,
                                              cudaStream_t);

}  // namespace dynemb::cache::detail

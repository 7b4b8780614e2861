// The writing kernels (replace, update, erase, clear: one warp per key, holding the locks of both
// candidate sets) and the whole-cache scans (sentinel check, size, dump).
#include <thrust/iterator/counting_iterator.h>

#include <cub/device/device_select.cuh>

#include <limits>

#include "cuda/device_view.cuh"
#include "cuda/kernels.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"

namespace dynemb::cache::detail {
namespace {

constexpr int kBlockThreads = 256;
constexpr int kWarpsPerBlock = kBlockThreads / kWarp;

// The least recently used slot of a warp's candidates: the lowest (stamp, key bits).
struct Victim {
  unsigned long long stamp;
  uint64_t bits;
  uint64_t slot;
};

__device__ __forceinline__ bool older(const Victim& a, const Victim& b) {
  return a.stamp != b.stamp ? a.stamp < b.stamp : a.bits < b.bits;
}

// Every lane's best candidate among its R slots of `set`, folded into `best`.
template <int R, class K>
__device__ __forceinline__ void fold_victims(const CacheView<K>& c, uint64_t set, int lane,
                                             Victim& best) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint64_t slot = set * c.ways + static_cast<uint64_t>(r * kWarp + lane);
    const Victim v{stamp_ref(c.stamps + slot).load(::cuda::memory_order_relaxed),
                   cache_key_bits(load_cg(c.keys + slot)), slot};
    if (older(v, best)) best = v;
  }
}

// The lowest (stamp, key bits) over the warp; the same in every lane.
__device__ __forceinline__ Victim warp_min(Victim v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const Victim o{__shfl_xor_sync(kFullMask, v.stamp, offset),
                   __shfl_xor_sync(kFullMask, v.bits, offset),
                   __shfl_xor_sync(kFullMask, v.slot, offset)};
    if (older(o, v)) v = o;
  }
  return v;
}

// Free slots of a set and the lowest free slot (within the set; -1 when none).
template <int R, class K>
__device__ __forceinline__ int free_slots(const K* set_keys, K empty_key, int lane, int& first) {
  int count = 0;
  first = -1;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const unsigned mask =
        __ballot_sync(kFullMask, load_cg(set_keys + r * kWarp + lane) == empty_key);
    if (first < 0 && mask != 0) first = r * kWarp + __ffs(mask) - 1;
    count += __popc(mask);
  }
  return count;
}

template <class K, int R>
__global__ void __launch_bounds__(kBlockThreads)
    write_kernel(CacheView<K> c, WriteKind kind, size_t n, const K* __restrict__ keys,
                 const float* __restrict__ values, unsigned long long base, bool vec4) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const size_t warps = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  unsigned long long inserted = 0, evicted = 0, refreshed = 0, erased = 0, sentinels = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; i < n;
       i += warps) {
    const K key = keys[i];
    if (key == c.empty_key) {
      ++sentinels;
      continue;
    }
    const CandidateSets sets = candidate_sets(cache_key_bits(key), c.num_sets);
    const uint64_t lo = sets.first < sets.second ? sets.first : sets.second;
    const uint64_t hi = sets.first < sets.second ? sets.second : sets.first;
    if (lane == 0) {
      lock_set(c.versions + lo);  // always in index order: no two warps wait on each other
      lock_set(c.versions + hi);
      __threadfence();
    }
    __syncwarp();
    const K* keys_a = c.keys + sets.first * c.ways;
    const K* keys_b = c.keys + sets.second * c.ways;
    const unsigned long long stamp = base + i;
    const int way_a = find_in_set<R>(keys_a, key, lane);
    const int way_b = way_a < 0 ? find_in_set<R>(keys_b, key, lane) : -1;
    const float* src = values + i * c.dim;
    if (way_a >= 0 || way_b >= 0) {
      const uint64_t slot = way_a >= 0 ? sets.first * c.ways + way_a : sets.second * c.ways + way_b;
      if (kind == WriteKind::kErase) {
        if (lane == 0) {
          c.keys[slot] = c.empty_key;
          stamp_ref(c.stamps + slot).store(0, ::cuda::memory_order_relaxed);
        }
        ++erased;
      } else if (kind == WriteKind::kUpdate) {
        copy_row(c.values + slot * c.dim, src, c.dim, lane, vec4);
        ++refreshed;
      } else {
        // A later copy of this key in the same call already wrote its row: keep that one.
        unsigned long long stored = 0;
        int write = 1;
        if (lane == 0) {
          stored = stamp_ref(c.stamps + slot).load(::cuda::memory_order_relaxed);
          write = !(stored >= base && stored < base + n && stored > stamp);
        }
        write = __shfl_sync(kFullMask, write, 0);
        if (write) {
          copy_row(c.values + slot * c.dim, src, c.dim, lane, vec4);
          if (lane == 0) {
            stamp_ref(c.stamps + slot)
                .store(stored > stamp ? stored : stamp, ::cuda::memory_order_relaxed);
          }
        }
        ++refreshed;
      }
    } else if (kind == WriteKind::kReplace) {
      int first_a = -1;
      int first_b = -1;
      const int free_a = free_slots<R>(keys_a, c.empty_key, lane, first_a);
      const int free_b = free_slots<R>(keys_b, c.empty_key, lane, first_b);
      uint64_t slot = 0;
      if (free_a > 0 || free_b > 0) {
        slot = free_a >= free_b ? sets.first * c.ways + first_a : sets.second * c.ways + first_b;
      } else {
        Victim best{~0ull, ~0ull, ~0ull};
        fold_victims<R>(c, sets.first, lane, best);
        fold_victims<R>(c, sets.second, lane, best);
        slot = warp_min(best).slot;
        ++evicted;
      }
      if (lane == 0) c.keys[slot] = key;
      copy_row(c.values + slot * c.dim, src, c.dim, lane, vec4);
      if (lane == 0) stamp_ref(c.stamps + slot).store(stamp, ::cuda::memory_order_relaxed);
      ++inserted;
    }
    // Every lane's writes are visible before the versions say the sets are free again.
    __threadfence();
    __syncwarp();
    if (lane == 0) {
      unlock_set(c.versions + hi);
      unlock_set(c.versions + lo);
    }
    __syncwarp();
  }
  if (lane == 0) {
    add_count(&c.counters->inserted, inserted);
    add_count(&c.counters->evicted, evicted);
    add_count(&c.counters->refreshed, refreshed);
    add_count(&c.counters->erased, erased);
    add_count(&c.counters->sentinel_keys, sentinels);
  }
}

template <class K>
__global__ void clear_kernel(CacheView<K> c) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t set = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
       set < c.num_sets; set += warps) {
    if (lane == 0) {
      lock_set(c.versions + set);
      __threadfence();
    }
    __syncwarp();
    for (uint32_t w = lane; w < c.ways; w += kWarp) {
      c.keys[set * c.ways + w] = c.empty_key;
      stamp_ref(c.stamps + set * c.ways + w).store(0, ::cuda::memory_order_relaxed);
    }
    __threadfence();
    __syncwarp();
    if (lane == 0) unlock_set(c.versions + set);
    __syncwarp();
  }
}

template <class K>
__global__ void find_sentinel_kernel(size_t n, const K* keys, K empty_key,
                                     unsigned long long* first) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (keys[i] == empty_key) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

// Sets *flag (host memory) when a key equals empty_key.
template <class K>
__global__ void flag_sentinel_kernel(size_t n, const K* keys, K empty_key, unsigned int* flag) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (keys[i] == empty_key) *static_cast<volatile unsigned int*>(flag) = 1u;
  }
}

// A word of pinned host memory the device writes to, one per host thread (a thread's sentinel
// check waits for its kernel before the next one, so the word is never shared by two checks).
unsigned int* thread_sentinel_flag() {
  struct Pinned {
    unsigned int* word = nullptr;
    ~Pinned() {
      if (word != nullptr) cudaFreeHost(word);
    }
  };
  thread_local Pinned pinned;
  if (pinned.word == nullptr) {
    void* p = nullptr;
    dynemb::core::cuda::check(
        cudaHostAlloc(&p, sizeof(unsigned int), cudaHostAllocMapped | cudaHostAllocPortable),
        "EmbeddingCache: cudaHostAlloc (sentinel check flag)");
    pinned.word = static_cast<unsigned int*>(p);
  }
  return pinned.word;
}

template <class K>
__global__ void count_stored_kernel(CacheView<K> c, unsigned long long* count) {
  const uint64_t slots = c.num_sets * c.ways;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (uint64_t s = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < slots;
       s += stride) {
    local += load_cg(c.keys + s) != c.empty_key;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    local += __shfl_xor_sync(kFullMask, local, offset);
  }
  if (threadIdx.x % kWarp == 0) add_count(count, local);
}

// True for the slots that hold a key.
template <class K>
struct StoredSlot {
  const K* keys;
  K empty_key;
  __device__ bool operator()(uint64_t slot) const { return load_cg(keys + slot) != empty_key; }
};

template <class K>
__global__ void gather_slots_kernel(CacheView<K> c, const uint64_t* slots,
                                    const unsigned long long* count, K* keys, float* values) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const uint64_t n = *count;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock;
  for (uint64_t k = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; k < n;
       k += warps) {
    const uint64_t slot = slots[k];
    if (lane == 0) keys[k] = c.keys[slot];
    if (values != nullptr) {
      for (uint32_t e = lane; e < c.dim; e += kWarp) {
        values[k * c.dim + e] = __ldcg(c.values + slot * c.dim + e);
      }
    }
  }
}

unsigned blocks_for_warps(uint64_t warps, uint32_t limit) {
  return static_cast<unsigned>(
      std::min<uint64_t>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock, limit));
}

}  // namespace

template <class K>
void launch_write(const CacheView<K>& view, WriteKind kind, size_t n, const K* keys,
                  const float* values, uint64_t base_stamp, uint32_t grid_limit,
                  cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = view.dim % 4 == 0 && reinterpret_cast<uintptr_t>(values) % 16 == 0;
  const unsigned blocks = blocks_for_warps(n, grid_limit);
  switch (view.ways) {
    case 32:
      write_kernel<K, 1>
          <<<blocks, kBlockThreads, 0, stream>>>(view, kind, n, keys, values, base_stamp, vec4);
      break;
    case 64:
      write_kernel<K, 2>
          <<<blocks, kBlockThreads, 0, stream>>>(view, kind, n, keys, values, base_stamp, vec4);
      break;
    default:
      write_kernel<K, 4>
          <<<blocks, kBlockThreads, 0, stream>>>(view, kind, n, keys, values, base_stamp, vec4);
      break;
  }
  dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache: write_kernel launch");
}

template <class K>
void launch_clear(const CacheView<K>& view, cudaStream_t stream) {
  clear_kernel<K><<<blocks_for_warps(view.num_sets, 65535), kBlockThreads, 0, stream>>>(view);
  dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache::clear: clear_kernel launch");
}

template <class K>
uint64_t find_sentinel(size_t n, const K* keys, K empty_key, cudaStream_t stream) {
  if (n == 0) return std::numeric_limits<uint64_t>::max();
  const unsigned blocks =
      static_cast<unsigned>(std::min<size_t>((n + kBlockThreads - 1) / kBlockThreads, 4096));
  // The common case, no sentinel: one kernel that writes to host memory only if it finds one,
  // then the stream's sync. Only then is the first position searched for (for the message).
  unsigned int* flag = thread_sentinel_flag();
  *static_cast<volatile unsigned int*>(flag) = 0u;
  flag_sentinel_kernel<K><<<blocks, kBlockThreads, 0, stream>>>(n, keys, empty_key, flag);
  dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache: flag_sentinel_kernel launch");
  dynemb::core::cuda::sync(stream, "EmbeddingCache: sentinel check");
  if (*static_cast<volatile unsigned int*>(flag) == 0u) return std::numeric_limits<uint64_t>::max();
  const dynemb::core::cuda::DeviceArray<unsigned long long> first(1, stream);
  dynemb::core::cuda::check(cudaMemsetAsync(first.data(), 0xFF, sizeof(unsigned long long), stream),
                            "EmbeddingCache: cudaMemsetAsync");
  find_sentinel_kernel<K><<<blocks, kBlockThreads, 0, stream>>>(n, keys, empty_key, first.data());
  dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache: find_sentinel_kernel launch");
  return dynemb::core::cuda::read_value(first.data(), stream, "EmbeddingCache: sentinel check");
}

template <class K>
uint64_t count_stored(const CacheView<K>& view, cudaStream_t stream) {
  const dynemb::core::cuda::DeviceArray<unsigned long long> count(1, stream);
  dynemb::core::cuda::check(cudaMemsetAsync(count.data(), 0, sizeof(unsigned long long), stream),
                            "EmbeddingCache::size: cudaMemsetAsync");
  const uint64_t slots = view.num_sets * view.ways;
  const unsigned blocks =
      static_cast<unsigned>(std::min<uint64_t>((slots + kBlockThreads - 1) / kBlockThreads, 4096));
  count_stored_kernel<K><<<blocks, kBlockThreads, 0, stream>>>(view, count.data());
  dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache::size: count_stored_kernel launch");
  return dynemb::core::cuda::read_value(count.data(), stream, "EmbeddingCache::size");
}

template <class K>
uint64_t dump_sets(const CacheView<K>& view, uint64_t first_set, uint64_t num_sets, K* keys,
                   float* values, cudaStream_t stream) {
  const uint64_t n = num_sets * view.ways;
  if (n == 0) return 0;
  const dynemb::core::cuda::DeviceArray<uint64_t> slots(n, stream);
  const dynemb::core::cuda::DeviceArray<unsigned long long> count(1, stream);
  thrust::counting_iterator<uint64_t> in(first_set * view.ways);
  const StoredSlot<K> stored{view.keys, view.empty_key};
  size_t temp_bytes = 0;
  dynemb::core::cuda::check(
      cub::DeviceSelect::If(nullptr, temp_bytes, in, slots.data(), count.data(),
                            static_cast<int64_t>(n), stored, stream),
      "EmbeddingCache::dump: cub::DeviceSelect::If (size)");
  const dynemb::core::cuda::DeviceArray<uint8_t> temp(temp_bytes, stream);
  dynemb::core::cuda::check(
      cub::DeviceSelect::If(temp.data(), temp_bytes, in, slots.data(), count.data(),
                            static_cast<int64_t>(n), stored, stream),
      "EmbeddingCache::dump: cub::DeviceSelect::If");
  gather_slots_kernel<K><<<blocks_for_warps(n, 8192), kBlockThreads, 0, stream>>>(
      view, slots.data(), count.data(), keys, values);
  dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache::dump: gather_slots_kernel launch");
  return dynemb::core::cuda::read_value(count.data(), stream, "EmbeddingCache::dump");
}

template void launch_write<int32_t>(const CacheView<int32_t>&, WriteKind, size_t, const int32_t*,
                                    const float*, uint64_t, uint32_t, cudaStream_t);
template void launch_write<int64_t>(const CacheView<int64_t>&, WriteKind, size_t, const int64_t*,
                                    const float*, uint64_t, uint32_t, cudaStream_t);
template void launch_write<uint64_t>(const CacheView<uint64_t>&, WriteKind, size_t, const uint64_t*,
                                     const float*, uint64_t, uint32_t, cudaStream_t);
template void launch_clear<int32_t>(const CacheView<int32_t>&, cudaStream_t);
template void launch_clear<int64_t>(const CacheView<int64_t>&, cudaStream_t);
template void launch_clear<uint64_t>(const CacheView<uint64_t>&, cudaStream_t);
template uint64_t find_sentinel<int32_t>(size_t, const int32_t*, int32_t, cudaStream_t);
template uint64_t find_sentinel<int64_t>(size_t, const int64_t*, int64_t, cudaStream_t);
template uint64_t find_sentinel<uint64_t>(size_t, const uint64_t*, uint64_t, cudaStream_t);
template uint64_t count_stored<int32_t>(const CacheView<int32_t>&, cudaStream_t);
template uint64_t count_stored<int64_t>(const CacheView<int64_t>&, cudaStream_t);
template uint64_t count_stored<uint64_t>(const CacheView<uint64_t>&, cudaStream_t);
template uint64_t dump_sets<int32_t>(const CacheView<int32_t>&, uint64_t, uint64_t, int32_t*,
                                     float*, cudaStream_t);
template uint64_t dump_sets<int64_t>(const CacheView<int64_t>&, uint64_t, uint64_t, int64_t*,
                                     float*, cudaStream_t);
template uint64_t dump_sets<uint64_t>(const CacheView<uint64_t>&, uint64_t, uint64_t, uint64_t*,
                                      float*, cudaStream_t);

}  // namespace dynemb::cache::detail

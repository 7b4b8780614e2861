// The CUDA cache's memory as kernels see it, and the warp-level pieces every kernel shares: the
// per-set version lock, L2-coherent loads, the candidate sets of a key.
//
// A set's version is even while the set is unlocked and odd while a writer holds it. Writers take
// it with a compare-and-swap (even -> odd) and release it with an increment (odd -> even), so every
// write makes the version larger. Readers never lock: they read the version, the keys and the row,
// then the version again, and keep what they read only if both versions are equal and even.
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "cuda/view.hpp"
#include "dynemb/cache/cache_options.hpp"
#include "dynemb/cache/cache_sets.hpp"

namespace dynemb::cache::detail {

inline constexpr unsigned kFullMask = 0xFFFFFFFFu;
inline constexpr int kWarp = 32;

// A load that bypasses the (non-coherent) L1, so data written by other SMs since is seen.
template <class K>
__device__ __forceinline__ K load_cg(const K* p) {
  if constexpr (sizeof(K) == 8) {
    return static_cast<K>(__ldcg(reinterpret_cast<const unsigned long long*>(p)));
  } else {
    return static_cast<K>(__ldcg(reinterpret_cast<const unsigned int*>(p)));
  }
}

__device__ __forceinline__ ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device> version_ref(
    uint32_t* v) {
  return ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device>(*v);
}

__device__ __forceinline__ ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>
stamp_ref(unsigned long long* s) {
  return ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(*s);
}

// Orders the loads before it (a row read between two reads of a set's version) before the loads
// after it (the second read): an acquire fence. PTX 8.6 (CUDA 12.8) has it on sm_90 as
// fence.acquire, which need not wait for this thread's stores as the fence.acq_rel that
// ::cuda::atomic_thread_fence(acquire) emits does.
__device__ __forceinline__ void acquire_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
  asm volatile("fence.acquire.gpu;" ::: "memory");
#else
  ::cuda::atomic_thread_fence(::cuda::memory_order_acquire, ::cuda::thread_scope_device);
#endif
}

// Called by one lane: waits until the set's version is even, then makes it odd (acquire).
__device__ __forceinline__ void lock_set(uint32_t* version) {
  auto v = version_ref(version);
  for (;;) {
    uint32_t current = v.load(::cuda::memory_order_relaxed);
    if ((current & 1u) == 0 &&
        v.compare_exchange_strong(current, current + 1, ::cuda::memory_order_acquire,
                                  ::cuda::memory_order_relaxed)) {
      return;
    }
    __nanosleep(32);
  }
}

// Called by one lane after every lane's writes were fenced: odd -> even (release).
__device__ __forceinline__ void unlock_set(uint32_t* version) {
  version_ref(version).fetch_add(1, ::cuda::memory_order_release);
}

// Refreshes a slot's stamp to `stamp` unless it is already as recent (one lane).
__device__ __forceinline__ void touch_stamp(unsigned long long* slot_stamp,
                                            unsigned long long stamp) {
  auto s = stamp_ref(slot_stamp);
  if (s.load(::cuda::memory_order_relaxed) < stamp) s.store(stamp, ::cuda::memory_order_relaxed);
}

// The slot (within the set) holding `key`, or -1; the same answer in every lane. Each lane looks
// at slots lane, lane + 32, ... (R = ways / 32 of them).
template <int R, class K>
__device__ __forceinline__ int find_in_set(const K* set_keys, K key, int lane) {
  int found = -1;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const unsigned match = __ballot_sync(kFullMask, load_cg(set_keys + r * kWarp + lane) == key);
    if (found < 0 && match != 0) found = r * kWarp + __ffs(match) - 1;
  }
  return found;
}

// Copies a row of `dim` floats with the warp (float4 when both rows are 16-byte aligned).
__device__ __forceinline__ void copy_row(float* dst, const float* src, uint32_t dim, int lane,
                                         bool vec4) {
  if (vec4) {
    const uint32_t n4 = dim / 4;
    for (uint32_t e = lane; e < n4; e += kWarp) {
      reinterpret_cast<float4*>(dst)[e] = reinterpret_cast<const float4*>(src)[e];
    }
  } else {
    for (uint32_t e = lane; e < dim; e += kWarp) dst[e] = src[e];
  }
}

// Adds a warp's local count to a device counter (lane 0; skipped when zero).
__device__ __forceinline__ void add_count(unsigned long long* counter, unsigned long long count) {
  if (count != 0) atomicAdd(counter, count);
}

}  // namespace dynemb::cache::detail

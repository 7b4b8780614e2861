// Asking the memory system for lines ahead of their use, so a fetch from HBM overlaps other
// work instead of stalling the load that needs it (docs/ops.md, docs/cuda_table.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dynemb::core::cuda {

inline constexpr uintptr_t kLineBytes = 128;

// Asks L2 for the 128-byte line holding `p`; no data comes back, nothing waits.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Asks L2 for every line of [p, p + bytes), the lines dealt out over `lanes` threads of which the
// caller is `lane`.
__device__ __forceinline__ void prefetch_range_l2(const void* p, size_t bytes, uint32_t lane,
                                                  uint32_t lanes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kLineBytes - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t line = begin + lane * kLineBytes; line < end; line += lanes * kLineBytes)
    prefetch_l2(reinterpret_cast<const void*>(line));
}

// Asks L2 for [p, p + bytes) in one bulk request (sm_90; one thread issues it), the lines kept as
// `policy` (l2_policy.cuh) says; p 16-byte aligned and bytes a multiple of 16, else (or before
// sm_90) every whole line of the range is asked for with a normal-priority prefetch.
__device__ __forceinline__ void prefetch_bulk_l2(const void* p, uint32_t bytes, uint64_t policy) {
#if __CUDA_ARCH__ >= 900
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0 && bytes % 16 == 0) {
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p),
                 "r"(bytes), "l"(policy)
                 : "memory");
    return;
  }
#endif
  prefetch_range_l2(p, bytes, 0, 1);
}

}  // namespace dynemb::core::cuda

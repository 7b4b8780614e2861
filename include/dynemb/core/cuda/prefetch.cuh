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

}  // namespace dynemb::core::cuda

// Loads and stores that tell L2 how soon to evict their lines (an L2 cache policy, sm_80 and
// later): the fused backward marks a row's lines evict-first, since a row is read, updated and
// written once while the bags' gradients beside it are read many times (docs/ops.md).
#pragma once

#include <cstdint>

namespace dynemb::core::cuda {

// A policy that marks every line it touches evict-first in L2. No memory access.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// *p (16-byte aligned), its line kept in L2 as `policy` says.
__device__ __forceinline__ float4 load_with_policy(const float4* p, uint64_t policy) {
  float4 v;
  asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// *p (8-byte aligned), its line kept in L2 as `policy` says.
__device__ __forceinline__ uint2 load_with_policy(const uint2* p, uint64_t policy) {
  uint2 v;
  asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p), "l"(policy));
  return v;
}

// *p = v (16-byte aligned), the line kept in L2 as `policy` says.
__device__ __forceinline__ void store_with_policy(float4* p, float4 v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w), "l"(policy)
               : "memory");
}

// *p = v (8-byte aligned), the line kept in L2 as `policy` says.
__device__ __forceinline__ void store_with_policy(uint2* p, uint2 v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v2.u32 [%0], {%1, %2}, %3;" ::"l"(p), "r"(v.x), "r"(v.y),
               "l"(policy)
               : "memory");
}

}  // namespace dynemb::core::cuda

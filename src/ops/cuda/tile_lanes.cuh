// How a warp holds a 128-element tile of a row in registers: kTileRegs floats per lane, either
// one float4 per lane (kVec = 4: elements 4 lane .. 4 lane + 3, one 16-byte load each) or four
// scalars (kVec = 1: elements lane, lane + 32, lane + 64, lane + 96). Both are coalesced; the
// arithmetic done per element is the same, so results do not depend on the choice.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dynemb::ops::cuda {

inline constexpr uint32_t kTileRegs = 4;
inline constexpr uint32_t kTileWidth = 32 * kTileRegs;

// Whether float4 access is allowed: every row start (base + r * stride) 16-byte aligned and the
// width a multiple of 4 floats.
inline bool vec4_ok(const void* base, size_t stride_floats, uint32_t width) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && stride_floats % 4 == 0 && width % 4 == 0;
}

template <uint32_t kVec>
struct TileLanes {
  static_assert(kVec == 1 || kVec == 4);
  // The element (from the tile start) lane `lane` holds in register q.
  __device__ static uint32_t element(uint32_t lane, uint32_t q) {
    return kVec == 4 ? 4 * lane + q : lane + 32 * q;
  }
  // Loads the lane's elements of tile p[0, width) (zeros past width).
  __device__ static void load(const float* p, uint32_t width, uint32_t lane,
                              float (&r)[kTileRegs]) {
    if constexpr (kVec == 4) {
      if (4 * lane < width) {
        const float4 v = *reinterpret_cast<const float4*>(p + 4 * lane);
        r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
      } else {
        r[0] = r[1] = r[2] = r[3] = 0.0f;
      }
    } else {
#pragma unroll
      for (uint32_t q = 0; q < kTileRegs; ++q) {
        const uint32_t j = lane + 32 * q;
        r[q] = j < width ? p[j] : 0.0f;
      }
    }
  }
  // Stores the lane's elements of tile p[0, width).
  __device__ static void store(float* p, uint32_t width, uint32_t lane,
                               const float (&r)[kTileRegs]) {
    if constexpr (kVec == 4) {
      if (4 * lane < width) *reinterpret_cast<float4*>(p + 4 * lane) = {r[0], r[1], r[2], r[3]};
    } else {
#pragma unroll
      for (uint32_t q = 0; q < kTileRegs; ++q) {
        const uint32_t j = lane + 32 * q;
        if (j < width) p[j] = r[q];
      }
    }
  }
};

// acc[q] = acc[q] + f * v[q], each product and sum rounded once (as the CPU does).
__device__ __forceinline__ void add_scaled(float (&acc)[kTileRegs], float f,
                                           const float (&v)[kTileRegs]) {
#pragma unroll
  for (uint32_t q = 0; q < kTileRegs; ++q) acc[q] = __fadd_rn(acc[q], __fmul_rn(f, v[q]));
}

}  // namespace dynemb::ops::cuda

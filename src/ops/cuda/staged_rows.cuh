// A warp's sum of up to 32 rows with their loads staged through shared memory: the lanes issue
// asynchronous copies of every row at once (no registers held while they fly), then the warp
// adds them in order from shared memory. pool_kernel's register loop keeps 4 rows (8 of 16-bit
// types) in flight a warp, which leaves the pooling and the hot chunk sums bound by latency. The
// additions are add_terms' (same products and sums in the same order), so results are
// bit-identical to it. Rows of at most kTileWidth elements, a multiple of 4 (kVec = 4's layout).
#pragma once

#include <cuda_pipeline_primitives.h>

#include <atomic>
#include <cstdint>

#include "cuda/row_tiles.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/value_type.hpp"

namespace dynemb::ops::cuda {

// Bytes of a lane's 4 elements of a kType row.
template <ValueType kType>
__host__ __device__ constexpr uint32_t staged_lane_bytes() {
  return kType == ValueType::kFloat32 ? 16 : 8;
}

// Shared memory one staged kType row takes (kTileWidth elements: 512 bytes, 256 for 16-bit).
template <ValueType kType>
__host__ __device__ constexpr uint32_t staged_row_bytes() {
  return 32 * staged_lane_bytes<kType>();
}

// Whether rows of `dim` elements can be staged.
__host__ __device__ constexpr bool stageable_dim(uint32_t dim) {
  return dim > 0 && dim <= kTileWidth && dim % 4 == 0;
}

// Copies the lane's 4 elements (from element 4 lane, when below dim) of `row` into `slot`
// asynchronously: one copy when the row is aligned for it, else 4-byte pieces (rows are whole
// 32-bit words apart, so always 4-byte aligned).
template <ValueType kType>
__device__ __forceinline__ void stage_lane(const float* row, uint32_t dim, uint32_t lane,
                                           uint8_t* slot) {
  constexpr uint32_t kBytes = staged_lane_bytes<kType>();
  if (4 * lane >= dim) return;
  const auto* src = reinterpret_cast<const uint8_t*>(row) + lane * kBytes;
  uint8_t* dst = slot + lane * kBytes;
  if (reinterpret_cast<uintptr_t>(src) % kBytes == 0) {
    __pipeline_memcpy_async(dst, src, kBytes);
  } else {
#pragma unroll
    for (uint32_t k = 0; k < kBytes; k += 4) __pipeline_memcpy_async(dst + k, src + k, 4);
  }
}

// The lane's 4 elements of a staged row, as float32 (exact), in kVec = 4's layout.
template <ValueType kType>
__device__ __forceinline__ void read_staged_lane(const uint8_t* slot, uint32_t lane,
                                                 float (&v)[kTileRegs]) {
  if constexpr (kType == ValueType::kFloat32) {
    const float4 f = *reinterpret_cast<const float4*>(slot + lane * 16);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else {
    unpack4<kType>(*reinterpret_cast<const uint2*>(slot + lane * 8), v);
  }
}

// Adds `count` (<= 32, at most the warp's slots) terms in order to the lane's registers: term t
// (held by lane t: row_t, f_t) is f_t times the kType row at row_t (null: zeros), dim elements.
// `slots`: the warp's shared memory, count * staged_row_bytes<kType>(). Every lane of the warp
// calls it.
template <ValueType kType>
__device__ __forceinline__ void add_staged_terms(float (&acc)[kTileRegs], uint32_t count,
                                                 const float* row_t, float f_t, uint32_t dim,
                                                 uint8_t* slots) {
  const uint32_t lane = lane_index();
  for (uint32_t u = 0; u < count; ++u) {
    const float* row = shuffle(row_t, u);
    if (row != nullptr) stage_lane<kType>(row, dim, lane, slots + u * staged_row_bytes<kType>());
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncwarp();
  for (uint32_t u = 0; u < count; ++u) {
    const bool null_row = shuffle(row_t, u) == nullptr;
    const float f = __shfl_sync(0xFFFFFFFFu, f_t, u);
    float v[kTileRegs] = {};
    if (!null_row && 4 * lane < dim)
      read_staged_lane<kType>(slots + u * staged_row_bytes<kType>(), lane, v);
    add_scaled(acc, f, v);
  }
  __syncwarp();
}

// Lets kKernel use `bytes` of dynamic shared memory on the current device (past the default 48
// KB); set once a device (the first 64 devices; others on every call).
template <auto kKernel>
void allow_shared_bytes(int bytes, const char* what) {
  static std::atomic<uint64_t> done{0};
  int device = 0;
  core::cuda::check(cudaGetDevice(&device), what);
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_relaxed) & bit) != 0) return;
  core::cuda::check(
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  done.fetch_or(bit, std::memory_order_relaxed);
}

}  // namespace dynemb::ops::cuda

// SUM / MEAN pooling of rows by address with the rows' loads staged through shared memory
// (staged_pool.cuh): a warp issues asynchronous copies of up to kStage rows of its bag at once,
// then adds them in order from shared memory. The register loop of pool_kernel keeps 4 rows (8
// of 16-bit types) in flight a warp, which left pooling bound by latency; copies into shared
// memory take no registers. Same additions in the same order, so the output is bit-identical.
#include <cuda_pipeline_primitives.h>

#include <type_traits>

#include "cuda/launch.cuh"
#include "cuda/row_tiles.cuh"
#include "cuda/staged_pool.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "id_factor.hpp"

namespace dynemb::ops::cuda {
namespace {

constexpr uint32_t kStage = 24;       // rows of a bag in flight a warp
constexpr uint32_t kStagedWarps = 4;  // warps a block
constexpr uint32_t kSlotBytes = 512;  // a row of up to 128 float32 elements

// Bytes of a lane's 4 elements of a kType row.
template <ValueType kType>
constexpr uint32_t lane_bytes() {
  return kType == ValueType::kFloat32 ? 16 : 8;
}

// Copies the lane's 4 elements (from element 4 lane, when below dim) of `row` into `slot`
// asynchronously: one copy when the row is aligned for it, else 4-byte pieces (rows are whole
// 32-bit words apart, so always 4-byte aligned).
template <ValueType kType>
__device__ __forceinline__ void copy_lane(const float* row, uint32_t dim, uint32_t lane,
                                          uint8_t* slot) {
  constexpr uint32_t kBytes = lane_bytes<kType>();
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
__device__ __forceinline__ void read_lane(const uint8_t* slot, uint32_t lane,
                                          float (&v)[kTileRegs]) {
  if constexpr (kType == ValueType::kFloat32) {
    const float4 f = *reinterpret_cast<const float4*>(slot + lane * 16);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else {
    unpack4<kType>(*reinterpret_cast<const uint2*>(slot + lane * 8), v);
  }
}

// One warp per bag: the bag's ids kStage at a time, each group's rows copied to the warp's slots
// together, then added in id order (a null row adds f * 0, as pool_kernel's zeros do).
template <ValueType kType>
__global__ void __launch_bounds__(kStagedWarps * 32)
    staged_pool_kernel(LookupFeature x, const float* const* ptrs, LookupOutput o) {
  extern __shared__ uint4 staged_rows[];
  const size_t b = warp_index();
  if (b >= x.num_bags) return;
  const uint32_t lane = lane_index();
  uint8_t* slots =
      reinterpret_cast<uint8_t*>(staged_rows) + (threadIdx.x / 32) * size_t{kStage} * kSlotBytes;
  const int64_t begin = x.offsets[b], end = x.offsets[b + 1];
  float acc[kTileRegs] = {};
  for (int64_t first = begin; first < end; first += kStage) {
    const uint32_t count = end - first < kStage ? static_cast<uint32_t>(end - first) : kStage;
    const float* row_t = nullptr;
    float f_t = 0.0f;
    if (lane < count) {
      row_t = ptrs[x.indices[first + lane]];
      f_t = detail::id_factor(x, first + lane, end - begin);
    }
    for (uint32_t u = 0; u < count; ++u) {
      const float* row = shuffle(row_t, u);
      if (row != nullptr) copy_lane<kType>(row, x.dim, lane, slots + u * kSlotBytes);
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncwarp();
    for (uint32_t u = 0; u < count; ++u) {
      const bool null_row = shuffle(row_t, u) == nullptr;
      const float f = __shfl_sync(0xFFFFFFFFu, f_t, u);
      float v[kTileRegs] = {};
      if (!null_row && 4 * lane < x.dim) read_lane<kType>(slots + u * kSlotBytes, lane, v);
      add_scaled(acc, f, v);
    }
    __syncwarp();
  }
  TileLanes<4>::store(o.out + b * o.out_stride, x.dim, lane, acc);
}

template <ValueType kType>
void launch_staged(const LookupFeature& x, const LookupOutput& o, cudaStream_t stream) {
  constexpr uint32_t kSharedBytes = kStagedWarps * kStage * kSlotBytes;
  static const bool configured = [] {
    core::cuda::check(
        cudaFuncSetAttribute(staged_pool_kernel<kType>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kSharedBytes)),
        "pooled_lookup: cudaFuncSetAttribute");
    return true;
  }();
  (void)configured;
  const size_t blocks = (x.num_bags + kStagedWarps - 1) / kStagedWarps;
  staged_pool_kernel<kType>
      <<<static_cast<unsigned>(blocks), kStagedWarps * 32, kSharedBytes, stream>>>(x, x.row_ptrs,
                                                                                   o);
  core::cuda::check_launch("pooled_lookup: staged_pool_kernel");
}

}  // namespace

bool staged_pool_fits(const LookupFeature& x, const LookupOutput& o) {
  return x.row_ptrs != nullptr && x.mode != PoolingMode::kNone && x.num_bags > 0 && x.dim > 0 &&
         x.dim <= kTileWidth && x.dim % 4 == 0 && vec4_ok(o.out, o.out_stride, x.dim);
}

void staged_pool(const LookupFeature& x, const LookupOutput& o, cudaStream_t stream) {
  switch (x.value_type) {
    case ValueType::kFloat16:
      return launch_staged<ValueType::kFloat16>(x, o, stream);
    case ValueType::kBFloat16:
      return launch_staged<ValueType::kBFloat16>(x, o, stream);
    default:
      return launch_staged<ValueType::kFloat32>(x, o, stream);
  }
}

}  // namespace dynemb::ops::cuda

// SUM / MEAN pooling of rows by address with the rows' loads staged through shared memory
// (staged_pool.cuh, staged_rows.cuh): a warp copies up to kStage rows of its bag at once, then
// adds them in order; bit-identical to pool_kernel.
#include <type_traits>

#include "cuda/launch.cuh"
#include "cuda/row_tiles.cuh"
#include "cuda/staged_pool.cuh"
#include "cuda/staged_rows.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "id_factor.hpp"

namespace dynemb::ops::cuda {
namespace {

constexpr uint32_t kStage = 24;       // rows of a bag in flight a warp
constexpr uint32_t kStagedWarps = 4;  // warps a block

// One warp per bag: the bag's ids kStage at a time, each group's rows copied to the warp's slots
// together, then added in id order (a null row adds f * 0, as pool_kernel's zeros do).
template <ValueType kType>
__global__ void __launch_bounds__(kStagedWarps * 32)
    staged_pool_kernel(LookupFeature x, const float* const* ptrs, LookupOutput o) {
  extern __shared__ uint4 staged_rows[];
  const size_t b = warp_index();
  if (b >= x.num_bags) return;
  const uint32_t lane = lane_index();
  uint8_t* slots = reinterpret_cast<uint8_t*>(staged_rows) +
                   (threadIdx.x / 32) * size_t{kStage} * staged_row_bytes<kType>();
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
    add_staged_terms<kType>(acc, count, row_t, f_t, x.dim, slots);
  }
  TileLanes<4>::store(o.out + b * o.out_stride, x.dim, lane, acc);
}

template <ValueType kType>
void launch_staged(const LookupFeature& x, const LookupOutput& o, cudaStream_t stream) {
  constexpr uint32_t kSharedBytes = kStagedWarps * kStage * staged_row_bytes<kType>();
  allow_shared_bytes<staged_pool_kernel<kType>>(static_cast<int>(kSharedBytes),
                                                "pooled_lookup: cudaFuncSetAttribute");
  const size_t blocks = (x.num_bags + kStagedWarps - 1) / kStagedWarps;
  staged_pool_kernel<kType>
      <<<static_cast<unsigned>(blocks), kStagedWarps * 32, kSharedBytes, stream>>>(x, x.row_ptrs,
                                                                                   o);
  core::cuda::check_launch("pooled_lookup: staged_pool_kernel");
}

}  // namespace

bool staged_pool_fits(const LookupFeature& x, const LookupOutput& o) {
  return x.row_ptrs != nullptr && x.mode != PoolingMode::kNone && x.num_bags > 0 &&
         stageable_dim(x.dim) && vec4_ok(o.out, o.out_stride, x.dim);
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

// The opt-in non-deterministic backward on the GPU (reduce_and_optimize_row_ptrs_unordered): one
// warp per bag adds its gradient, times each id's factor, into the rows' gradients with float
// atomics, then the optimizer kernel updates every row from them. Nothing is grouped or sorted
// and no chunk sums go through memory; the order of the additions (and so the last bits of a hot
// row's sum) depends on scheduling.
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "id_factor.hpp"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::as_stream;
using ops::cuda::blocks_for_warps;
using ops::cuda::kBlock;
using ops::cuda::lane_index;
using ops::cuda::warp_index;

// One warp per bag (NONE: per id): row_grads[indices[i]] += factor_i * grad of the bag (its
// elements g.type, converted to float32).
__global__ void scatter_add_kernel(LookupFeature x, LookupOutput g, float* row_grads,
                                   uint32_t stride) {
  const size_t b = warp_index();
  const bool none = x.mode == PoolingMode::kNone;
  if (b >= (none ? x.num_ids : x.num_bags)) return;
  const int64_t begin = none ? static_cast<int64_t>(b) : x.offsets[b];
  const int64_t end = none ? begin + 1 : x.offsets[b + 1];
  const int64_t len = none ? 1 : end - begin;
  const float* grad = g.out + b * g.out_stride;
  for (int64_t i = begin; i < end; ++i) {
    const float f = id_factor(x, i, len);
    float* dst = row_grads + size_t{x.indices[i]} * stride;
    for (uint32_t j = lane_index(); j < x.dim; j += 32) {
      atomicAdd(dst + j, __fmul_rn(f, load_value(g.type, grad, j)));
    }
  }
}

}  // namespace

void reduce_and_optimize_row_ptrs_atomic_cuda(const OptimizerOptions& o, const LookupFeature& x,
                                              const LookupOutput& g, float* const* rows,
                                              const bool* skip, uint64_t* nonfinite,
                                              StepWorkspace& workspace,
                                              StreamHandle stream_handle) {
  if (x.num_rows == 0) return;
  const cudaStream_t stream = as_stream(stream_handle);
  const uint32_t stride = (x.dim + 3) / 4 * 4;  // 16-byte rows: the optimizer's float4 lanes
  const size_t bytes = x.num_rows * size_t{stride} * sizeof(float);
  auto* row_grads = static_cast<float*>(workspace.scratch(bytes, stream));
  core::cuda::check(cudaMemsetAsync(row_grads, 0, bytes, stream),
                    "reduce_and_optimize_unordered: cudaMemsetAsync");
  const size_t warps = x.mode == PoolingMode::kNone ? x.num_ids : x.num_bags;
  if (warps > 0) {
    scatter_add_kernel<<<blocks_for_warps(warps), kBlock, 0, stream>>>(x, g, row_grads, stride);
    core::cuda::check_launch("reduce_and_optimize_unordered: scatter_add_kernel");
  }
  apply_optimizer_row_ptrs_cuda(o, x.num_rows, rows, row_grads, stride, x.dim, skip, nonfinite,
                                stream_handle);
}

}  // namespace dynemb::ops::detail

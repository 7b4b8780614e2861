// The gradient reduction fused with the optimizer, by address (reduce_and_optimize_row_ptrs) on
// the GPU: a row's gradient is summed in the fixed order of reduce_gradients into shared memory
// and the row is updated from there, by the same update_row as apply_optimizer_row_ptrs; so the
// rows end bit-identical to the two calls, and no per-row gradient goes to device memory.
#include <algorithm>

#include "core/cuda/check.hpp"
#include "ops/backends.hpp"
#include "ops/cuda/gradient_chunks.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/optimizer_warp.cuh"
#include "ops/cuda/row_tiles.cuh"
#include "ops/cuda/tile_lanes.cuh"

namespace dynemb::detail {
namespace {

using ops_cuda::add_chunk_sums;
using ops_cuda::as_stream;
using ops_cuda::blocks_for_warps;
using ops_cuda::gradient_nonfinite;
using ops_cuda::hot_row_count;
using ops_cuda::HotChunks;
using ops_cuda::kBlock;
using ops_cuda::kWarpsPerBlock;
using ops_cuda::sum_ids;
using ops_cuda::update_row;
using ops_cuda::warp_index;

constexpr int kHotBlock = 128;

// The warp's update of row `row` from its reduced gradient: skipped when the gradient holds a NaN
// or Inf (counted into *nonfinite when not null, as the guarded optimizer does), when skip[row] is
// set, or when the row has no address.
template <OptimizerKind kKind, uint32_t kVec>
__device__ void optimize_reduced_row(const OptimizerOptions& o, size_t row, const float* grad,
                                     uint32_t dim, float* const* rows, const bool* skip,
                                     unsigned long long* nonfinite) {
  if (nonfinite != nullptr && gradient_nonfinite<kVec>(grad, dim, nonfinite)) return;
  if (skip != nullptr && skip[row]) return;
  float* p = rows[row];
  if (p == nullptr) return;
  update_row<kKind, kVec, true>(o, p, grad, dim);
}

// One warp per row of at most one chunk: its gradient summed into the warp's slice of shared
// memory (grad_stride floats), then the row updated from there. Hot rows are left to
// fused_hot_row_kernel.
template <OptimizerKind kKind, uint32_t kVec>
__global__ void fused_cold_row_kernel(OptimizerOptions o, LookupFeature x, LookupOutput g,
                                      IdGroups groups, HotChunks h, float* const* rows,
                                      const bool* skip, unsigned long long* nonfinite,
                                      uint32_t grad_stride) {
  extern __shared__ float4 shared_grads[];
  const size_t row = warp_index();
  if (row >= x.num_rows || h.chunk_count[row] != 0) return;
  float* grad = reinterpret_cast<float*>(shared_grads) + (threadIdx.x / 32) * grad_stride;
  sum_ids<kVec>(x, g, groups.ids_by_row, h.bag_of, groups.row_begin[row], groups.row_begin[row + 1],
                grad);
  __syncwarp();
  optimize_reduced_row<kKind, kVec>(o, row, grad, x.dim, rows, skip, nonfinite);
}

// One block per hot row (grid-stride): its chunk sums added in order, one thread per element,
// into shared memory; then the block's first warp updates the row from there.
template <OptimizerKind kKind, uint32_t kVec>
__global__ void fused_hot_row_kernel(OptimizerOptions o, uint32_t dim, HotChunks h,
                                     float* const* rows, const bool* skip,
                                     unsigned long long* nonfinite) {
  extern __shared__ float4 shared_grad[];
  float* grad = reinterpret_cast<float*>(shared_grad);
  const size_t hot = hot_row_count(h);
  for (size_t k = blockIdx.x; k < hot; k += gridDim.x) {
    const uint32_t row = h.hot_rows[k];
    const uint32_t first = h.chunk_first[row], count = h.chunk_count[row];
    for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x) {
      grad[j] = add_chunk_sums(h, first, count, j);
    }
    __syncthreads();
    if (threadIdx.x < 32)
      optimize_reduced_row<kKind, kVec>(o, row, grad, dim, rows, skip, nonfinite);
    __syncthreads();
  }
}

template <OptimizerKind kKind, uint32_t kVec>
void launch_fused(const OptimizerOptions& o, const LookupFeature& x, IdGroups groups,
                  const LookupOutput& g, const HotChunks& h, float* const* rows, const bool* skip,
                  unsigned long long* nonfinite, uint32_t grad_stride, cudaStream_t stream) {
  const size_t row_bytes = size_t{grad_stride} * sizeof(float);
  fused_cold_row_kernel<kKind, kVec>
      <<<blocks_for_warps(x.num_rows), kBlock, kWarpsPerBlock * row_bytes, stream>>>(
          o, x, g, groups, h, rows, skip, nonfinite, grad_stride);
  cuda::check_launch("reduce_and_optimize: fused_cold_row_kernel");
  if (x.num_ids == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>(h.max_hot_rows, 2048));
  fused_hot_row_kernel<kKind, kVec>
      <<<blocks, kHotBlock, row_bytes, stream>>>(o, x.dim, h, rows, skip, nonfinite);
  cuda::check_launch("reduce_and_optimize: fused_hot_row_kernel");
}

}  // namespace

void reduce_and_optimize_row_ptrs_cuda(const OptimizerOptions& o, const LookupFeature& x,
                                       IdGroups groups, const LookupOutput& g, float* const* rows,
                                       const bool* skip, uint64_t* nonfinite,
                                       StepWorkspace& workspace, StreamHandle stream_handle) {
  if (x.num_rows == 0) return;
  const cudaStream_t stream = as_stream(stream_handle);
  const uint32_t grad_stride = (x.dim + 3) / 4 * 4;
  if (x.dim > kFusedMaxDim) {
    // Rows too wide for shared memory: the gradients go through the workspace.
    auto* row_grads = static_cast<float*>(
        workspace.scratch(x.num_rows * size_t{grad_stride} * sizeof(float), stream));
    reduce_gradients_grouped_cuda(x, groups, g, {row_grads, grad_stride}, stream_handle);
    apply_optimizer_row_ptrs_cuda(o, x.num_rows, rows, row_grads, grad_stride, x.dim, skip,
                                  nonfinite, stream_handle);
    return;
  }
  ops_cuda::keep_pool_memory(stream);
  const ops_cuda::HotChunkPlan plan(x, stream);
  const HotChunks h = plan.issue(x, groups, g, workspace.scratch(plan.bytes(), stream), stream);
  // float4 lanes for the gradient rows read (and the shared rows, aligned, stride a multiple of
  // 4); the arithmetic is the same either way.
  const bool vec = ops_cuda::vec4_ok(g.out, g.out_stride, x.dim);
  auto* bad = reinterpret_cast<unsigned long long*>(nonfinite);
  ops_cuda::with_optimizer_kind(o.kind, [&](auto kind) {
    constexpr OptimizerKind kKind = decltype(kind)::value;
    if (vec) {
      launch_fused<kKind, 4>(o, x, groups, g, h, rows, skip, bad, grad_stride, stream);
    } else {
      launch_fused<kKind, 1>(o, x, groups, g, h, rows, skip, bad, grad_stride, stream);
    }
  });
}

}  // namespace dynemb::detail

// The two-level part of the deterministic gradient reduction on the GPU: rows read by more than
// kGradientChunk ids ("hot" rows) have their ids cut into chunks of kGradientChunk, one warp sums
// each chunk from zero into `partial`, and the chunk sums of a row are then added in order
// (add_chunk_sums). Rows of at most one chunk are left to the caller (one warp each, sum_ids).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "dynemb/ops/step_workspace.hpp"

namespace dynemb::ops::cuda {

// Whether a row read by `ids` ids is hot (its ids are cut into chunks) rather than cold (one warp
// sums them).
__host__ __device__ constexpr bool is_hot_row(uint32_t ids) {
  return ids > kGradientChunk;
}

// What sum_hot_chunks leaves in device memory for the rest of the reduction.
struct HotChunks {
  const uint32_t* bag_by_row = nullptr;   // num_ids: the bag of id ids_by_row[k] (SUM / MEAN)
  const uint32_t* chunk_count = nullptr;  // num_rows: a hot row's chunks (hot rows' entries only)
  // num_rows: a hot row's first chunk; its chunks are consecutive, the rows' in any order
  const uint32_t* chunk_first = nullptr;
  const uint32_t* hot_rows = nullptr;  // the hot rows, in any order, [0, *hot_count)
  const uint32_t* hot_count = nullptr;
  size_t max_hot_rows = 0;         // an upper bound of *hot_count
  const float* partial = nullptr;  // chunk k's sum at partial + k * partial_stride
  uint32_t partial_stride = 0;     // dim rounded up to a multiple of 4
};

// The scratch the hot chunks of one feature take, and their issue on it.
class HotChunkPlan {
 public:
  // Sizes the scratch of feature x (num_rows > 0) grouped by `groups` (scratch for the ids' bags
  // only when the groups do not bring them). Keeps both views.
  HotChunkPlan(const LookupFeature& x, const detail::IdGroups& groups);
  // Bytes of device scratch issue() needs.
  size_t bytes() const { return bytes_; }
  // Issues, on `stream` over bytes() of `scratch`, for the feature and groups given to the
  // constructor and the bags' gradients g (float32): the bags of the ids
  // (unless the groups bring them), the hot rows among the rows in use (x.live_rows), their
  // chunks' places and the chunk sums. No synchronization.
  HotChunks issue(const LookupOutput& g, void* scratch, cudaStream_t stream) const;

 private:
  struct Arrays;
  Arrays carve(detail::ScratchCarver& c) const;

  LookupFeature x_;
  detail::IdGroups groups_;
  size_t max_hot_rows_, max_chunks_;
  bool needs_bags_;
  uint32_t partial_stride_;
  size_t bytes_ = 0;
};

// Element j of a hot row: the sum, from zero and in order, of its `count` chunk sums starting at
// chunk `first` (loads issued kAhead chunks ahead).
__device__ __forceinline__ float add_chunk_sums(const HotChunks& h, uint32_t first, uint32_t count,
                                                uint32_t j) {
  constexpr uint32_t kAhead = 64;
  const size_t stride = h.partial_stride;
  const float* p = h.partial + static_cast<size_t>(first) * stride + j;
  float acc = 0.0f;
  uint32_t c = 0;
  for (; c + kAhead <= count; c += kAhead) {
    float v[kAhead];
#pragma unroll
    for (uint32_t u = 0; u < kAhead; ++u) v[u] = p[(c + u) * stride];
#pragma unroll
    for (uint32_t u = 0; u < kAhead; ++u) acc = __fadd_rn(acc, v[u]);
  }
  for (; c < count; ++c) acc = __fadd_rn(acc, p[c * stride]);
  return acc;
}

// Hot row `row`'s gradient into out[0, dim): element j, for each j this thread takes of a block
// striding over the elements, is add_chunk_sums of the row's chunks.
__device__ __forceinline__ void add_hot_row(const HotChunks& h, uint32_t row, uint32_t dim,
                                            float* out) {
  const uint32_t first = h.chunk_first[row], count = h.chunk_count[row];
  for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x)
    out[j] = add_chunk_sums(h, first, count, j);
}

// The number of hot rows to work on (hot_count, read on the device, bounded).
__device__ __forceinline__ size_t hot_row_count(const HotChunks& h) {
  return min(static_cast<size_t>(*h.hot_count), h.max_hot_rows);
}

}  // namespace dynemb::ops::cuda

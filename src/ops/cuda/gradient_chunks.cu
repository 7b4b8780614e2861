// The hot chunks of the gradient reduction (gradient_chunks.cuh).
#include "cuda/gradient_chunks.cuh"
#include "cuda/launch.cuh"
#include "cuda/row_tiles.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/cuda/check.hpp"

namespace dynemb::ops::cuda {
namespace {

using detail::IdGroups;

// bag_by_row[k] = bag_of[ids_by_row[k]]: the bags in the order the reduction reads its ids.
__global__ void bag_by_row_kernel(const uint32_t* ids_by_row, const uint32_t* bag_of, size_t n,
                                  uint32_t* bag_by_row) {
  const size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < n) bag_by_row[k] = bag_of[ids_by_row[k]];
}

// Hot rows (more than one chunk) among the rows in use (the first *live_rows when live_rows is
// not null, else all num_rows): chunk_count[r] = their chunks and chunk_first[r] their first,
// taken from counters[1] (a row's chunks consecutive, the rows in any order), and the hot rows
// listed (in any order) in hot_rows[0, counters[0]). The other rows' entries are not written.
__global__ void hot_rows_kernel(const uint32_t* row_begin, size_t num_rows,
                                const uint64_t* live_rows, uint32_t* chunk_count,
                                uint32_t* chunk_first, uint32_t* hot_rows, uint32_t* counters) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= num_rows || (live_rows != nullptr && r >= *live_rows)) return;
  const uint32_t len = row_begin[r + 1] - row_begin[r];
  if (!is_hot_row(len)) return;
  const uint32_t chunks = (len + kGradientChunk - 1) / kGradientChunk;
  chunk_count[r] = chunks;
  chunk_first[r] = atomicAdd(&counters[1], chunks);
  hot_rows[atomicAdd(&counters[0], 1u)] = static_cast<uint32_t>(r);
}

// chunk_row[k] = the row of hot chunk k; one warp per hot row.
__global__ void chunk_row_kernel(const uint32_t* hot_rows, const uint32_t* hot_count,
                                 size_t max_hot_rows, const uint32_t* chunk_first,
                                 const uint32_t* chunk_count, uint32_t* chunk_row) {
  const size_t h = warp_index();
  if (h >= max_hot_rows || h >= *hot_count) return;
  const uint32_t r = hot_rows[h];
  for (uint32_t c = lane_index(); c < chunk_count[r]; c += 32) chunk_row[chunk_first[r] + c] = r;
}

// One warp per hot chunk k (launched for an upper bound; the real count, *chunk_total, is read
// here). Gradients of kGradType (g.type).
template <uint32_t kVec, ValueType kGradType>
__global__ void hot_chunk_kernel(LookupFeature x, LookupOutput g, IdGroups groups,
                                 const uint32_t* bag_by_row, const uint32_t* chunk_first,
                                 const uint32_t* chunk_total, const uint32_t* chunk_row,
                                 size_t max_chunks, uint32_t partial_stride, float* partial) {
  const size_t k = warp_index();
  if (k >= max_chunks || k >= *chunk_total) return;
  const uint32_t r = chunk_row[k];
  const uint32_t begin =
      groups.row_begin[r] + (static_cast<uint32_t>(k) - chunk_first[r]) * kGradientChunk;
  const uint32_t end = min(begin + kGradientChunk, groups.row_begin[r + 1]);
  sum_ids<kVec, kGradType>(x, g, groups.ids_by_row, bag_by_row, begin, end,
                           partial + k * partial_stride);
}

}  // namespace

struct HotChunkPlan::Arrays {
  uint32_t *bag_of, *bag_by_row, *chunk_count, *chunk_first, *hot_rows, *chunk_row;
  uint32_t* counters;  // the hot rows, the hot chunks
  float* partial;
};

HotChunkPlan::Arrays HotChunkPlan::carve(detail::ScratchCarver& c) const {
  Arrays a;
  a.bag_of = needs_bags_ ? c.take<uint32_t>(x_.num_ids) : nullptr;
  a.bag_by_row = needs_bags_ ? c.take<uint32_t>(x_.num_ids) : nullptr;
  a.chunk_count = c.take<uint32_t>(x_.num_rows);
  a.chunk_first = c.take<uint32_t>(x_.num_rows);
  a.hot_rows = c.take<uint32_t>(max_hot_rows_);
  a.counters = c.take<uint32_t>(2);
  a.chunk_row = c.take<uint32_t>(max_chunks_);
  a.partial = c.take<float>(max_chunks_ * partial_stride_);
  return a;
}

HotChunkPlan::HotChunkPlan(const LookupFeature& x, const IdGroups& groups)
    : x_(x),
      groups_(groups),
      needs_bags_(x.num_ids > 0 && x.mode != PoolingMode::kNone && groups.bag_by_row == nullptr) {
  // Rows of more than kGradientChunk ids: at most n / (kGradientChunk + 1); their chunks at most
  // n / kGradientChunk + one partly filled per hot row.
  max_hot_rows_ = x.num_ids / (kGradientChunk + 1) + 1;
  max_chunks_ = x.num_ids / kGradientChunk + max_hot_rows_;
  partial_stride_ = (x.dim + 3) / 4 * 4;
  detail::ScratchCarver measure;
  carve(measure);
  bytes_ = measure.bytes();
}

HotChunks HotChunkPlan::issue(const LookupOutput& g, void* scratch, cudaStream_t stream) const {
  const LookupFeature& x = x_;
  const IdGroups& groups = groups_;
  detail::ScratchCarver place(scratch);
  const Arrays a = carve(place);
  const size_t n = x.num_ids, u = x.num_rows;
  core::cuda::check(cudaMemsetAsync(a.counters, 0, 2 * sizeof(uint32_t), stream),
                    "reduce_gradients: cudaMemsetAsync");
  // The bags in the reduction's order: the dedup's, else worked out here.
  const uint32_t* bag_by_row = groups.bag_by_row != nullptr ? groups.bag_by_row : a.bag_by_row;
  if (needs_bags_) {
    fill_bag_of(x.offsets, x.num_bags, n, a.bag_of, stream);
    bag_by_row_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(groups.ids_by_row, a.bag_of, n,
                                                                    a.bag_by_row);
    core::cuda::check_launch("reduce_gradients: bag_by_row_kernel");
  }
  hot_rows_kernel<<<blocks_for_threads(u), kBlock, 0, stream>>>(
      groups.row_begin, u, x.live_rows, a.chunk_count, a.chunk_first, a.hot_rows, a.counters);
  core::cuda::check_launch("reduce_gradients: hot_rows_kernel");
  chunk_row_kernel<<<blocks_for_warps(max_hot_rows_), kBlock, 0, stream>>>(
      a.hot_rows, a.counters, max_hot_rows_, a.chunk_first, a.chunk_count, a.chunk_row);
  core::cuda::check_launch("reduce_gradients: chunk_row_kernel");
  if (n > 0) {
    const unsigned blocks = blocks_for_warps(max_chunks_);
    // partial is 256-byte aligned with a stride of a multiple of 4 floats.
    with_gradient_type(g.type, [&](auto grad_type) {
      constexpr ValueType kGradType = decltype(grad_type)::value;
      if (gradients_vec4_ok(g, x.dim)) {
        hot_chunk_kernel<4, kGradType>
            <<<blocks, kBlock, 0, stream>>>(x, g, groups, bag_by_row, a.chunk_first, a.counters + 1,
                                            a.chunk_row, max_chunks_, partial_stride_, a.partial);
      } else {
        hot_chunk_kernel<1, kGradType>
            <<<blocks, kBlock, 0, stream>>>(x, g, groups, bag_by_row, a.chunk_first, a.counters + 1,
                                            a.chunk_row, max_chunks_, partial_stride_, a.partial);
      }
    });
    core::cuda::check_launch("reduce_gradients: hot_chunk_kernel");
  }
  HotChunks h;
  h.bag_by_row = bag_by_row;
  h.chunk_count = a.chunk_count;
  h.chunk_first = a.chunk_first;
  h.hot_rows = a.hot_rows;
  h.hot_count = a.counters;
  h.max_hot_rows = max_hot_rows_;
  h.partial = a.partial;
  h.partial_stride = partial_stride_;
  return h;
}

}  // namespace dynemb::ops::cuda

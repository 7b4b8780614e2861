// Pooled lookup and deterministic gradient reduction on the GPU. Additions happen in the same
// order as on the CPU (ascending id), each product and sum rounded once (__fmul_rn /
// __fadd_rn), so results are bit-identical to the CPU backend.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <climits>

#include "core/cuda/check.hpp"
#include "core/cuda/device_array.hpp"
#include "ops/backends.hpp"
#include "ops/cuda/launch.cuh"
#include "ops/id_factor.hpp"

namespace dynemb::detail {
namespace {

using ops_cuda::as_stream;
using ops_cuda::blocks_for_threads;
using ops_cuda::blocks_for_warps;
using ops_cuda::kBlock;
using ops_cuda::lane_index;
using ops_cuda::warp_index;

// Row elements a warp keeps in registers at once: kPerLane per lane.
constexpr uint32_t kPerLane = 4;
constexpr uint32_t kTile = 32 * kPerLane;

// first[0]: first b >= 1 with offsets[b] < offsets[b-1]; first[1]: first i with a bad index.
__global__ void check_offsets_kernel(const int64_t* offsets, size_t num_bags,
                                     unsigned long long* first) {
  const size_t b = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x + 1;
  if (b <= num_bags && offsets[b] < offsets[b - 1]) atomicMin(&first[0], b);
}

__global__ void check_indices_kernel(const uint32_t* indices, size_t num_ids, size_t num_rows,
                                     unsigned long long* first) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < num_ids && indices[i] >= num_rows) atomicMin(&first[1], i);
}

// One warp per bag; lanes over the row's elements.
__global__ void pool_kernel(LookupFeature x, LookupOutput o) {
  const size_t b = warp_index();
  if (b >= x.num_bags) return;
  const int64_t begin = x.offsets[b], end = x.offsets[b + 1];
  if (x.mode == PoolingMode::kNone) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = x.rows + static_cast<size_t>(x.indices[i]) * x.row_stride;
      float* out = o.out + static_cast<size_t>(i) * o.out_stride;
      const float w = x.weights != nullptr ? x.weights[i] : 1.0f;
      for (uint32_t j = lane_index(); j < x.dim; j += 32) out[j] = __fmul_rn(w, row[j]);
    }
    return;
  }
  float* out = o.out + b * o.out_stride;
  // Tiles of kTile elements (kTile / 32 per lane) in registers; ids in order inside a tile.
  for (uint32_t tile = 0; tile < x.dim; tile += kTile) {
    float acc[kPerLane] = {};
    for (int64_t i = begin; i < end; ++i) {
      const float f = id_factor(x, i, end - begin);
      const float* row = x.rows + static_cast<size_t>(x.indices[i]) * x.row_stride + tile;
#pragma unroll
      for (uint32_t q = 0; q < kPerLane; ++q) {
        const uint32_t j = lane_index() + 32 * q;
        if (tile + j < x.dim) acc[q] = __fadd_rn(acc[q], __fmul_rn(f, row[j]));
      }
    }
#pragma unroll
    for (uint32_t q = 0; q < kPerLane; ++q) {
      const uint32_t j = lane_index() + 32 * q;
      if (tile + j < x.dim) out[tile + j] = acc[q];
    }
  }
}

// bag_of[i] = the bag holding id i (one warp per bag).
__global__ void bag_of_id_kernel(const int64_t* offsets, size_t num_bags, uint32_t* bag_of) {
  const size_t b = warp_index();
  if (b >= num_bags) return;
  for (int64_t i = offsets[b] + lane_index(); i < offsets[b + 1]; i += 32) {
    bag_of[i] = static_cast<uint32_t>(b);
  }
}

// seg_begin / seg_end of each row in the ids sorted (stably) by row.
__global__ void segments_kernel(const uint32_t* sorted_rows, size_t n, uint32_t* seg_begin,
                                uint32_t* seg_end) {
  const size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint32_t r = sorted_rows[k];
  if (k == 0 || sorted_rows[k - 1] != r) seg_begin[r] = static_cast<uint32_t>(k);
  if (k + 1 == n || sorted_rows[k + 1] != r) seg_end[r] = static_cast<uint32_t>(k + 1);
}

// Chunks of kGradientChunk ids per row: chunk_count[r] = ceil(len(r) / kGradientChunk).
__global__ void chunk_count_kernel(const uint32_t* seg_begin, const uint32_t* seg_end,
                                   size_t num_rows, uint32_t* chunk_count) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < num_rows)
    chunk_count[r] = (seg_end[r] - seg_begin[r] + kGradientChunk - 1) / kGradientChunk;
}

// chunk_row[k] = the row of chunk k (chunk_first[r] = r's first chunk); one warp per row.
__global__ void chunk_row_kernel(const uint32_t* chunk_first, const uint32_t* chunk_count,
                                 size_t num_rows, uint32_t* chunk_row) {
  const size_t r = warp_index();
  if (r >= num_rows) return;
  for (uint32_t c = lane_index(); c < chunk_count[r]; c += 32) {
    chunk_row[chunk_first[r] + c] = static_cast<uint32_t>(r);
  }
}

// For each id in row-sorted order: the gradient row it reads and its factor, so the chunk
// kernel does one broadcast load per id instead of a chain of dependent ones.
__global__ void id_terms_kernel(LookupFeature x, const uint32_t* sorted_ids, const uint32_t* bag_of,
                                size_t n, uint32_t* grad_row, float* factor) {
  const size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= n) return;
  const uint32_t i = sorted_ids[p];
  const uint32_t b = bag_of[i];
  grad_row[p] = x.mode == PoolingMode::kNone ? i : b;
  factor[p] = id_factor(x, i, x.offsets[b + 1] - x.offsets[b]);
}

// One warp per chunk: the sum, from zero and in ascending id order, of its ids' contributions.
__global__ void chunk_sum_kernel(uint32_t dim, LookupOutput g, const uint32_t* grad_row,
                                 const float* factor, const uint32_t* seg_begin,
                                 const uint32_t* seg_end, const uint32_t* chunk_first,
                                 const uint32_t* chunk_count, const uint32_t* chunk_row,
                                 size_t num_rows, size_t max_chunks, float* partial) {
  const size_t k = warp_index();
  // Launched for the upper bound; the real count is known on the device only.
  const size_t num_chunks = chunk_first[num_rows - 1] + chunk_count[num_rows - 1];
  if (k >= num_chunks || k >= max_chunks) return;
  const uint32_t row = chunk_row[k];
  const uint32_t begin =
      seg_begin[row] + (static_cast<uint32_t>(k) - chunk_first[row]) * kGradientChunk;
  const uint32_t end = min(begin + kGradientChunk, seg_end[row]);
  for (uint32_t tile = 0; tile < dim; tile += kTile) {
    float acc[kPerLane] = {};
    for (uint32_t p = begin; p < end; ++p) {
      const float f = factor[p];
      const float* grad = g.out + static_cast<size_t>(grad_row[p]) * g.out_stride + tile;
#pragma unroll
      for (uint32_t q = 0; q < kPerLane; ++q) {
        const uint32_t j = lane_index() + 32 * q;
        if (tile + j < dim) acc[q] = __fadd_rn(acc[q], __fmul_rn(f, grad[j]));
      }
    }
#pragma unroll
    for (uint32_t q = 0; q < kPerLane; ++q) {
      const uint32_t j = lane_index() + 32 * q;
      if (tile + j < dim) partial[k * dim + tile + j] = acc[q];
    }
  }
}

// One warp per row: its chunk sums added in order (zeros for a row no id reads).
__global__ void row_sum_kernel(uint32_t dim, size_t num_rows, const uint32_t* chunk_first,
                               const uint32_t* chunk_count, const float* partial, LookupOutput r) {
  const size_t row = warp_index();
  if (row >= num_rows) return;
  const uint32_t first = chunk_first[row], count = chunk_count[row];
  for (uint32_t j = lane_index(); j < dim; j += 32) {
    float acc = 0.0f;
    for (uint32_t c = 0; c < count; ++c) acc = __fadd_rn(acc, partial[size_t(first + c) * dim + j]);
    r.out[row * r.out_stride + j] = acc;
  }
}

// Radix bits needed for values in [0, values).
int bits_for(size_t values) {
  int bits = 1;
  while (bits < 32 && (size_t{1} << bits) < values) ++bits;
  return bits;
}

}  // namespace

void validate_lookup_data_cuda(const char* where, std::span<const LookupFeature> features,
                               StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    if (x.num_bags == 0) continue;
    cuda::DeviceArray<unsigned long long> first(2, stream);
    cuda::check(cudaMemsetAsync(first.data(), 0xFF, 2 * sizeof(unsigned long long), stream),
                "validate_lookup: cudaMemsetAsync");
    check_offsets_kernel<<<blocks_for_threads(x.num_bags), kBlock, 0, stream>>>(
        x.offsets, x.num_bags, first.data());
    cuda::check_launch("validate_lookup: check_offsets_kernel");
    if (x.num_ids > 0) {
      check_indices_kernel<<<blocks_for_threads(x.num_ids), kBlock, 0, stream>>>(
          x.indices, x.num_ids, x.num_rows, first.data());
      cuda::check_launch("validate_lookup: check_indices_kernel");
    }
    unsigned long long bad[2];
    int64_t ends[2];
    cuda::check(cudaMemcpyAsync(bad, first.data(), sizeof bad, cudaMemcpyDeviceToHost, stream),
                "validate_lookup: read checks");
    cuda::check(
        cudaMemcpyAsync(&ends[0], x.offsets, sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
        "validate_lookup: read offsets[0]");
    cuda::check(cudaMemcpyAsync(&ends[1], x.offsets + x.num_bags, sizeof(int64_t),
                                cudaMemcpyDeviceToHost, stream),
                "validate_lookup: read last offset");
    cuda::sync(stream, "validate_lookup");
    if (ends[0] != 0) throw_bad_first_offset(where, f, ends[0]);
    if (bad[0] != ULLONG_MAX) {
      int64_t pair[2];
      cuda::check(cudaMemcpy(pair, x.offsets + bad[0] - 1, sizeof pair, cudaMemcpyDeviceToHost),
                  "validate_lookup: read bad offset");
      throw_decreasing_offset(where, f, bad[0], pair[1], pair[0]);
    }
    if (static_cast<size_t>(ends[1]) != x.num_ids) {
      throw_bad_last_offset(where, f, x.num_bags, ends[1], x.num_ids);
    }
    if (bad[1] != ULLONG_MAX) {
      uint32_t value;
      cuda::check(cudaMemcpy(&value, x.indices + bad[1], sizeof value, cudaMemcpyDeviceToHost),
                  "validate_lookup: read bad index");
      throw_bad_index(where, f, bad[1], value, x.num_rows);
    }
  }
}

void pooled_lookup_cuda(std::span<const LookupFeature> features,
                        std::span<const LookupOutput> outputs, StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  for (size_t f = 0; f < features.size(); ++f) {
    if (features[f].num_bags == 0) continue;
    pool_kernel<<<blocks_for_warps(features[f].num_bags), kBlock, 0, stream>>>(features[f],
                                                                               outputs[f]);
    cuda::check_launch("pooled_lookup: pool_kernel");
  }
}

void reduce_gradients_cuda(std::span<const LookupFeature> features,
                           std::span<const LookupOutput> grads,
                           std::span<const LookupOutput> row_grads, StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    if (x.num_rows == 0) continue;
    const size_t n = x.num_ids;
    // At most one partly filled chunk per row plus the full ones.
    const size_t max_chunks = x.num_rows + n / kGradientChunk;
    cuda::DeviceArray<uint32_t> ids(n, stream), sorted_ids(n, stream), sorted_rows(n, stream),
        bag_of(n, stream), seg_begin(x.num_rows, stream), seg_end(x.num_rows, stream),
        chunk_count(x.num_rows, stream), chunk_first(x.num_rows, stream),
        chunk_row(max_chunks, stream), grad_row(n, stream);
    cuda::DeviceArray<float> partial(max_chunks * x.dim, stream), factor(n, stream);
    cuda::check(cudaMemsetAsync(seg_begin.data(), 0, x.num_rows * sizeof(uint32_t), stream),
                "reduce_gradients: cudaMemsetAsync");
    cuda::check(cudaMemsetAsync(seg_end.data(), 0, x.num_rows * sizeof(uint32_t), stream),
                "reduce_gradients: cudaMemsetAsync");
    size_t scan_bytes = 0, sort_bytes = 0;
    const int bits = bits_for(x.num_rows);
    cuda::check(
        cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, chunk_count.data(), chunk_first.data(),
                                      static_cast<int>(x.num_rows), stream),
        "reduce_gradients: ExclusiveSum (size)");
    if (n > 0) {
      cuda::check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, x.indices,
                                                  sorted_rows.data(), ids.data(), sorted_ids.data(),
                                                  static_cast<int>(n), 0, bits, stream),
                  "reduce_gradients: SortPairs (size)");
    }
    cuda::DeviceArray<uint8_t> temp(std::max(scan_bytes, sort_bytes), stream);
    if (n > 0) {
      bag_of_id_kernel<<<blocks_for_warps(x.num_bags), kBlock, 0, stream>>>(x.offsets, x.num_bags,
                                                                            bag_of.data());
      cuda::check_launch("reduce_gradients: bag_of_id_kernel");
      ops_cuda::fill_iota(ids.data(), n, stream);
      // Stable radix sort of (row, id): the ids of one row stay in ascending order.
      cuda::check(cub::DeviceRadixSort::SortPairs(temp.data(), sort_bytes, x.indices,
                                                  sorted_rows.data(), ids.data(), sorted_ids.data(),
                                                  static_cast<int>(n), 0, bits, stream),
                  "reduce_gradients: SortPairs");
      segments_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(
          sorted_rows.data(), n, seg_begin.data(), seg_end.data());
      cuda::check_launch("reduce_gradients: segments_kernel");
    }
    chunk_count_kernel<<<blocks_for_threads(x.num_rows), kBlock, 0, stream>>>(
        seg_begin.data(), seg_end.data(), x.num_rows, chunk_count.data());
    cuda::check_launch("reduce_gradients: chunk_count_kernel");
    cuda::check(
        cub::DeviceScan::ExclusiveSum(temp.data(), scan_bytes, chunk_count.data(),
                                      chunk_first.data(), static_cast<int>(x.num_rows), stream),
        "reduce_gradients: ExclusiveSum");
    chunk_row_kernel<<<blocks_for_warps(x.num_rows), kBlock, 0, stream>>>(
        chunk_first.data(), chunk_count.data(), x.num_rows, chunk_row.data());
    cuda::check_launch("reduce_gradients: chunk_row_kernel");
    if (n > 0) {
      id_terms_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(
          x, sorted_ids.data(), bag_of.data(), n, grad_row.data(), factor.data());
      cuda::check_launch("reduce_gradients: id_terms_kernel");
    }
    chunk_sum_kernel<<<blocks_for_warps(max_chunks), kBlock, 0, stream>>>(
        x.dim, grads[f], grad_row.data(), factor.data(), seg_begin.data(), seg_end.data(),
        chunk_first.data(), chunk_count.data(), chunk_row.data(), x.num_rows, max_chunks,
        partial.data());
    cuda::check_launch("reduce_gradients: chunk_sum_kernel");
    row_sum_kernel<<<blocks_for_warps(x.num_rows), kBlock, 0, stream>>>(
        x.dim, x.num_rows, chunk_first.data(), chunk_count.data(), partial.data(), row_grads[f]);
    cuda::check_launch("reduce_gradients: row_sum_kernel");
  }
}

}  // namespace dynemb::detail

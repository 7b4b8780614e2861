// Pooled lookup and deterministic gradient reduction on the GPU. Additions happen in the same
// order as on the CPU (ascending id), each product and sum rounded once (__fmul_rn /
// __fadd_rn), so results are bit-identical to the CPU backend.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>

#include "core/cuda/check.hpp"
#include "core/cuda/device_array.hpp"
#include "ops/backends.hpp"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/tile_lanes.cuh"
#include "ops/id_factor.hpp"

namespace dynemb::detail {
namespace {

using ops_cuda::add_scaled;
using ops_cuda::as_stream;
using ops_cuda::blocks_for_threads;
using ops_cuda::blocks_for_warps;
using ops_cuda::kBlock;
using ops_cuda::kTileRegs;
using ops_cuda::kTileWidth;
using ops_cuda::lane_index;
using ops_cuda::TileLanes;
using ops_cuda::warp_index;

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

// Rows in the dense layout: row r at base + r * stride; a lane passes a row on as its index.
struct DenseRows {
  const float* base;
  size_t stride;
  using Handle = uint32_t;
  static constexpr bool kByAddress = false;
  __device__ Handle handle(uint32_t r) const { return r; }
  __device__ const float* at(Handle h) const { return base + h * stride; }
};

// Rows by address: row r at ptrs[r] (nullptr: zeros); a lane passes a row on as its address.
struct AddressedRows {
  const float* const* ptrs;
  using Handle = const float*;
  static constexpr bool kByAddress = true;
  __device__ Handle handle(uint32_t r) const { return ptrs[r]; }
  __device__ const float* at(Handle h) const { return h; }
};

__device__ __forceinline__ uint32_t shuffle(uint32_t v, uint32_t from) {
  return __shfl_sync(0xFFFFFFFFu, v, from);
}
__device__ __forceinline__ const float* shuffle(const float* p, uint32_t from) {
  return reinterpret_cast<const float*>(
      __shfl_sync(0xFFFFFFFFu, reinterpret_cast<unsigned long long>(p), from));
}

// Loads the lane's elements of tile [tile, tile + width) of `row` in kVec's layout. By address,
// a null row reads zeros and a row not 16-byte aligned is read element by element (same
// layout, so the same values land in the same registers).
template <uint32_t kVec, class Rows>
__device__ __forceinline__ void load_tile(const float* row, uint32_t tile, uint32_t width,
                                          uint32_t lane, float (&v)[kTileRegs]) {
  if constexpr (Rows::kByAddress) {
    if (row == nullptr) {
#pragma unroll
      for (uint32_t q = 0; q < kTileRegs; ++q) v[q] = 0.0f;
      return;
    }
    if constexpr (kVec == 4) {
      if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
#pragma unroll
        for (uint32_t q = 0; q < kTileRegs; ++q) {
          const uint32_t j = 4 * lane + q;
          v[q] = j < width ? row[tile + j] : 0.0f;
        }
        return;
      }
    }
  }
  TileLanes<kVec>::load(row + tile, width, lane, v);
}

// Adds `count` (<= 32) terms in order to the lane's registers of one tile: term t (held by lane
// t: h_t, f_t) is f_t times the row `rows` gives for handle h_t, from element `tile`, `width`
// elements. Loads are issued kUnroll terms ahead of their additions.
template <uint32_t kVec, class Rows>
__device__ __forceinline__ void add_terms(float (&acc)[kTileRegs], uint32_t count,
                                          typename Rows::Handle h_t, float f_t, const Rows& rows,
                                          uint32_t tile, uint32_t width) {
  constexpr uint32_t kUnroll = 4;
  const uint32_t lane = lane_index();
  uint32_t t = 0;
  for (; t + kUnroll <= count; t += kUnroll) {
    float v[kUnroll][kTileRegs];
    float f[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const typename Rows::Handle h = shuffle(h_t, t + u);
      f[u] = __shfl_sync(0xFFFFFFFFu, f_t, t + u);
      load_tile<kVec, Rows>(rows.at(h), tile, width, lane, v[u]);
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) add_scaled(acc, f[u], v[u]);
  }
  for (; t < count; ++t) {
    float v[kTileRegs];
    const typename Rows::Handle h = shuffle(h_t, t);
    const float f = __shfl_sync(0xFFFFFFFFu, f_t, t);
    load_tile<kVec, Rows>(rows.at(h), tile, width, lane, v);
    add_scaled(acc, f, v);
  }
}

// The factor of id i (id_factor), reading the bag length only for MEAN.
__device__ __forceinline__ float factor_of(const LookupFeature& x, uint32_t i, uint32_t bag) {
  const int64_t len = x.mode == PoolingMode::kMean ? x.offsets[bag + 1] - x.offsets[bag] : 1;
  return id_factor(x, i, len);
}

// SUM / MEAN: one warp per bag; ids in order, a tile of the row in registers.
template <uint32_t kVec, class Rows>
__global__ void pool_kernel(LookupFeature x, Rows rows, LookupOutput o) {
  const size_t b = warp_index();
  if (b >= x.num_bags) return;
  const uint32_t lane = lane_index();
  const int64_t begin = x.offsets[b], end = x.offsets[b + 1];
  float* out = o.out + b * o.out_stride;
  for (uint32_t tile = 0; tile < x.dim; tile += kTileWidth) {
    const uint32_t width = min(kTileWidth, x.dim - tile);
    float acc[kTileRegs] = {};
    for (int64_t first = begin; first < end; first += 32) {
      const uint32_t count = end - first < 32 ? static_cast<uint32_t>(end - first) : 32u;
      typename Rows::Handle h_t{};
      float f_t = 0.0f;
      if (lane < count) {
        h_t = rows.handle(x.indices[first + lane]);
        f_t = id_factor(x, first + lane, end - begin);
      }
      add_terms<kVec>(acc, count, h_t, f_t, rows, tile, width);
    }
    TileLanes<kVec>::store(out + tile, width, lane, acc);
  }
}

// NONE: one warp per id, out row i = weight_i * row.
template <uint32_t kVec, class Rows>
__global__ void pool_none_kernel(LookupFeature x, Rows rows, LookupOutput o) {
  const size_t i = warp_index();
  if (i >= x.num_ids) return;
  const uint32_t lane = lane_index();
  const float* row = rows.at(rows.handle(x.indices[i]));
  float* out = o.out + i * o.out_stride;
  const float w = x.weights != nullptr ? x.weights[i] : 1.0f;
  for (uint32_t tile = 0; tile < x.dim; tile += kTileWidth) {
    const uint32_t width = min(kTileWidth, x.dim - tile);
    float v[kTileRegs];
    load_tile<kVec, Rows>(row, tile, width, lane, v);
#pragma unroll
    for (uint32_t q = 0; q < kTileRegs; ++q) v[q] = __fmul_rn(w, v[q]);
    TileLanes<kVec>::store(out + tile, width, lane, v);
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

// row_begin of ids sorted (stably) by row: rows r with sorted[k - 1] < r <= sorted[k] start at
// k (one thread per k in [0, n]; sorted[-1] = -1, sorted[n] = num_rows).
__global__ void row_begin_kernel(const uint32_t* sorted_rows, size_t n, size_t num_rows,
                                 uint32_t* row_begin) {
  const size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k > n) return;
  const int64_t previous = k == 0 ? -1 : static_cast<int64_t>(sorted_rows[k - 1]);
  const int64_t current = k == n ? static_cast<int64_t>(num_rows) : sorted_rows[k];
  for (int64_t r = previous + 1; r <= current; ++r) row_begin[r] = static_cast<uint32_t>(k);
}

// Hot rows (more than one chunk): chunk_count[r] = their chunks (0 for the others), and the
// hot rows listed (in any order) in hot_rows[0, *hot_count).
__global__ void hot_rows_kernel(const uint32_t* row_begin, size_t num_rows, uint32_t* chunk_count,
                                uint32_t* hot_rows, uint32_t* hot_count) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= num_rows) return;
  const uint32_t len = row_begin[r + 1] - row_begin[r];
  const uint32_t chunks = len > kGradientChunk ? (len + kGradientChunk - 1) / kGradientChunk : 0;
  chunk_count[r] = chunks;
  if (chunks > 0) hot_rows[atomicAdd(hot_count, 1u)] = static_cast<uint32_t>(r);
}

// chunk_row[k] = the row of hot chunk k (chunk_first: exclusive scan of chunk_count); one warp
// per hot row.
__global__ void chunk_row_kernel(const uint32_t* hot_rows, const uint32_t* hot_count,
                                 size_t max_hot_rows, const uint32_t* chunk_first,
                                 const uint32_t* chunk_count, uint32_t* chunk_row) {
  const size_t h = warp_index();
  if (h >= max_hot_rows || h >= *hot_count) return;
  const uint32_t r = hot_rows[h];
  for (uint32_t c = lane_index(); c < chunk_count[r]; c += 32) chunk_row[chunk_first[r] + c] = r;
}

// The sum, from zero and in ascending id order, of ids_by_row[begin, end) into `out` (dim
// floats): each id's bag gradient (NONE: its own) times its factor.
template <uint32_t kVec>
__device__ __forceinline__ void sum_ids(const LookupFeature& x, const LookupOutput& g,
                                        const uint32_t* ids_by_row, const uint32_t* bag_of,
                                        uint32_t begin, uint32_t end, float* out) {
  const uint32_t lane = lane_index();
  for (uint32_t tile = 0; tile < x.dim; tile += kTileWidth) {
    const uint32_t width = min(kTileWidth, x.dim - tile);
    float acc[kTileRegs] = {};
    for (uint32_t first = begin; first < end; first += 32) {
      const uint32_t count = min(32u, end - first);
      uint32_t row_t = 0;
      float f_t = 0.0f;
      if (lane < count) {
        const uint32_t i = ids_by_row[first + lane];
        const uint32_t b = x.mode == PoolingMode::kNone ? 0 : bag_of[i];
        row_t = x.mode == PoolingMode::kNone ? i : b;
        f_t = factor_of(x, i, b);
      }
      add_terms<kVec>(acc, count, row_t, f_t, DenseRows{g.out, g.out_stride}, tile, width);
    }
    TileLanes<kVec>::store(out + tile, width, lane, acc);
  }
}

// One warp per hot chunk k (launched for an upper bound; the real count is read here).
template <uint32_t kVec>
__global__ void hot_chunk_kernel(LookupFeature x, LookupOutput g, IdGroups groups,
                                 const uint32_t* bag_of, const uint32_t* chunk_first,
                                 const uint32_t* chunk_count, const uint32_t* chunk_row,
                                 size_t max_chunks, uint32_t partial_stride, float* partial) {
  const size_t k = warp_index();
  const size_t last = x.num_rows - 1;
  if (k >= max_chunks || k >= chunk_first[last] + chunk_count[last]) return;
  const uint32_t r = chunk_row[k];
  const uint32_t begin =
      groups.row_begin[r] + (static_cast<uint32_t>(k) - chunk_first[r]) * kGradientChunk;
  const uint32_t end = min(begin + kGradientChunk, groups.row_begin[r + 1]);
  sum_ids<kVec>(x, g, groups.ids_by_row, bag_of, begin, end, partial + k * partial_stride);
}

// One warp per row of at most one chunk: its sum straight into the row gradient (zeros for a
// row no id reads). Hot rows are left to hot_row_kernel.
template <uint32_t kVec>
__global__ void cold_row_kernel(LookupFeature x, LookupOutput g, IdGroups groups,
                                const uint32_t* bag_of, const uint32_t* chunk_count,
                                LookupOutput r) {
  const size_t row = warp_index();
  if (row >= x.num_rows || chunk_count[row] != 0) return;
  sum_ids<kVec>(x, g, groups.ids_by_row, bag_of, groups.row_begin[row], groups.row_begin[row + 1],
                r.out + row * r.out_stride);
}

// One block per hot row (grid-stride), one thread per element: the row's chunk sums added in order,
// loads issued kAhead chunks ahead.
__global__ void hot_row_kernel(uint32_t dim, const uint32_t* hot_rows, const uint32_t* hot_count,
                               size_t max_hot_rows, const uint32_t* chunk_first,
                               const uint32_t* chunk_count, const float* partial,
                               uint32_t partial_stride, LookupOutput r) {
  constexpr uint32_t kAhead = 16;
  const size_t hot = min(static_cast<size_t>(*hot_count), max_hot_rows);
  for (size_t h = blockIdx.x; h < hot; h += gridDim.x) {
    const uint32_t row = hot_rows[h];
    const uint32_t first = chunk_first[row], count = chunk_count[row];
    for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float* p = partial + static_cast<size_t>(first) * partial_stride + j;
      float acc = 0.0f;
      uint32_t c = 0;
      for (; c + kAhead <= count; c += kAhead) {
        float v[kAhead];
#pragma unroll
        for (uint32_t u = 0; u < kAhead; ++u) v[u] = p[static_cast<size_t>(c + u) * partial_stride];
#pragma unroll
        for (uint32_t u = 0; u < kAhead; ++u) acc = __fadd_rn(acc, v[u]);
      }
      for (; c < count; ++c) acc = __fadd_rn(acc, p[static_cast<size_t>(c) * partial_stride]);
      r.out[row * r.out_stride + j] = acc;
    }
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

namespace {

// Launches the pooling kernels of one feature whose rows `rows` gives.
template <class Rows>
void launch_pool(const LookupFeature& x, const Rows& rows, const LookupOutput& o, bool vec,
                 cudaStream_t stream) {
  if (x.mode == PoolingMode::kNone) {
    if (x.num_ids == 0) return;
    const unsigned blocks = blocks_for_warps(x.num_ids);
    if (vec) {
      pool_none_kernel<4><<<blocks, kBlock, 0, stream>>>(x, rows, o);
    } else {
      pool_none_kernel<1><<<blocks, kBlock, 0, stream>>>(x, rows, o);
    }
  } else if (vec) {
    pool_kernel<4><<<blocks_for_warps(x.num_bags), kBlock, 0, stream>>>(x, rows, o);
  } else {
    pool_kernel<1><<<blocks_for_warps(x.num_bags), kBlock, 0, stream>>>(x, rows, o);
  }
  cuda::check_launch("pooled_lookup: pool_kernel");
}

}  // namespace

void pooled_lookup_cuda(std::span<const LookupFeature> features,
                        std::span<const LookupOutput> outputs, StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    const LookupOutput& o = outputs[f];
    if (x.num_bags == 0) continue;
    const bool out_vec = ops_cuda::vec4_ok(o.out, o.out_stride, x.dim);
    if (x.row_ptrs != nullptr) {
      // Rows by address: float4 lanes where dim allows; a misaligned row is read per element.
      launch_pool(x, AddressedRows{x.row_ptrs}, o, out_vec && x.dim % 4 == 0, stream);
    } else {
      const bool vec = out_vec && ops_cuda::vec4_ok(x.rows, x.row_stride, x.dim);
      launch_pool(x, DenseRows{x.rows, x.row_stride}, o, vec, stream);
    }
  }
}

void reduce_gradients_grouped_cuda(const LookupFeature& x, IdGroups groups, const LookupOutput& g,
                                   const LookupOutput& r, StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  if (x.num_rows == 0) return;
  ops_cuda::keep_pool_memory(stream);
  const size_t n = x.num_ids, u = x.num_rows;
  // Rows of more than kGradientChunk ids: at most n / (kGradientChunk + 1); their chunks at
  // most n / kGradientChunk + one partly filled per hot row.
  const size_t max_hot_rows = n / (kGradientChunk + 1) + 1;
  const size_t max_chunks = n / kGradientChunk + max_hot_rows;
  const uint32_t partial_stride = (x.dim + 3) / 4 * 4;
  cuda::DeviceArray<uint32_t> bag_of(n, stream), chunk_count(u, stream), chunk_first(u, stream),
      hot_rows(max_hot_rows, stream), hot_count(1, stream), chunk_row(max_chunks, stream);
  cuda::check(cudaMemsetAsync(hot_count.data(), 0, sizeof(uint32_t), stream),
              "reduce_gradients: cudaMemsetAsync");
  if (n > 0 && x.mode != PoolingMode::kNone) {
    bag_of_id_kernel<<<blocks_for_warps(x.num_bags), kBlock, 0, stream>>>(x.offsets, x.num_bags,
                                                                          bag_of.data());
    cuda::check_launch("reduce_gradients: bag_of_id_kernel");
  }
  hot_rows_kernel<<<blocks_for_threads(u), kBlock, 0, stream>>>(
      groups.row_begin, u, chunk_count.data(), hot_rows.data(), hot_count.data());
  cuda::check_launch("reduce_gradients: hot_rows_kernel");
  size_t scan_bytes = 0;
  cuda::check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, chunk_count.data(),
                                            chunk_first.data(), static_cast<int>(u), stream),
              "reduce_gradients: ExclusiveSum (size)");
  cuda::DeviceArray<uint8_t> temp(scan_bytes, stream);
  cuda::check(cub::DeviceScan::ExclusiveSum(temp.data(), scan_bytes, chunk_count.data(),
                                            chunk_first.data(), static_cast<int>(u), stream),
              "reduce_gradients: ExclusiveSum");
  chunk_row_kernel<<<blocks_for_warps(max_hot_rows), kBlock, 0, stream>>>(
      hot_rows.data(), hot_count.data(), max_hot_rows, chunk_first.data(), chunk_count.data(),
      chunk_row.data());
  cuda::check_launch("reduce_gradients: chunk_row_kernel");
  const bool vec = ops_cuda::vec4_ok(g.out, g.out_stride, x.dim) &&
                   ops_cuda::vec4_ok(r.out, r.out_stride, x.dim);
  cuda::DeviceArray<float> partial(max_chunks * partial_stride, stream);
  if (n > 0) {
    const unsigned blocks = blocks_for_warps(max_chunks);
    if (vec) {
      hot_chunk_kernel<4><<<blocks, kBlock, 0, stream>>>(
          x, g, groups, bag_of.data(), chunk_first.data(), chunk_count.data(), chunk_row.data(),
          max_chunks, partial_stride, partial.data());
    } else {
      hot_chunk_kernel<1><<<blocks, kBlock, 0, stream>>>(
          x, g, groups, bag_of.data(), chunk_first.data(), chunk_count.data(), chunk_row.data(),
          max_chunks, partial_stride, partial.data());
    }
    cuda::check_launch("reduce_gradients: hot_chunk_kernel");
  }
  if (vec) {
    cold_row_kernel<4><<<blocks_for_warps(u), kBlock, 0, stream>>>(x, g, groups, bag_of.data(),
                                                                   chunk_count.data(), r);
  } else {
    cold_row_kernel<1><<<blocks_for_warps(u), kBlock, 0, stream>>>(x, g, groups, bag_of.data(),
                                                                   chunk_count.data(), r);
  }
  cuda::check_launch("reduce_gradients: cold_row_kernel");
  if (n > 0) {
    constexpr int kHotBlock = 128;
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>(max_hot_rows, 2048));
    hot_row_kernel<<<blocks, kHotBlock, 0, stream>>>(
        x.dim, hot_rows.data(), hot_count.data(), max_hot_rows, chunk_first.data(),
        chunk_count.data(), partial.data(), partial_stride, r);
    cuda::check_launch("reduce_gradients: hot_row_kernel");
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
    // The ids grouped by row: a stable radix sort of (row, id), only the bits rows need.
    cuda::DeviceArray<uint32_t> ids(n, stream), sorted_ids(n, stream), sorted_rows(n, stream),
        row_begin(x.num_rows + 1, stream);
    if (n > 0) {
      size_t sort_bytes = 0;
      const int bits = bits_for(x.num_rows);
      cuda::check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, x.indices,
                                                  sorted_rows.data(), ids.data(), sorted_ids.data(),
                                                  static_cast<int>(n), 0, bits, stream),
                  "reduce_gradients: SortPairs (size)");
      cuda::DeviceArray<uint8_t> temp(sort_bytes, stream);
      ops_cuda::fill_iota(ids.data(), n, stream);
      cuda::check(cub::DeviceRadixSort::SortPairs(temp.data(), sort_bytes, x.indices,
                                                  sorted_rows.data(), ids.data(), sorted_ids.data(),
                                                  static_cast<int>(n), 0, bits, stream),
                  "reduce_gradients: SortPairs");
    }
    row_begin_kernel<<<blocks_for_threads(n + 1), kBlock, 0, stream>>>(
        sorted_rows.data(), n, x.num_rows, row_begin.data());
    cuda::check_launch("reduce_gradients: row_begin_kernel");
    reduce_gradients_grouped_cuda(x, {sorted_ids.data(), row_begin.data()}, grads[f], row_grads[f],
                                  stream_handle);
  }
}

}  // namespace dynemb::detail

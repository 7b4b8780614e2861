// Pooled lookup and deterministic gradient reduction on the GPU. Additions happen in the same
// order as on the CPU (ascending id), each product and sum rounded once (__fmul_rn /
// __fadd_rn), so results are bit-identical to the CPU backend.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "cuda/cuda_kernels.hpp"
#include "cuda/gradient_chunks.cuh"
#include "cuda/launch.cuh"
#include "cuda/row_tiles.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"
#include "id_factor.hpp"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::add_hot_row;
using ops::cuda::add_terms;
using ops::cuda::AddressedRows;
using ops::cuda::as_stream;
using ops::cuda::blocks_for_threads;
using ops::cuda::blocks_for_warps;
using ops::cuda::DenseRows;
using ops::cuda::hot_row_count;
using ops::cuda::HotChunks;
using ops::cuda::is_hot_row;
using ops::cuda::kBlock;
using ops::cuda::kTileRegs;
using ops::cuda::kTileWidth;
using ops::cuda::lane_index;
using ops::cuda::load_tile;
using ops::cuda::store_tile;
using ops::cuda::sum_ids;
using ops::cuda::TileLanes;
using ops::cuda::warp_index;

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

// Threads of a pooling block, and the blocks a multiprocessor keeps resident (__launch_bounds__):
// 64-thread blocks free a finished warp pair's slots without waiting for six more warps, and 16 of
// them cap the kernel at 64 registers, 32 warps a multiprocessor (the 16-bit rows' kernel took 72
// registers, 24 warps, when left to itself). The pooling is bound by the latency of its chains of
// dependent loads, so resident warps are what speeds it up (docs/ops.md).
inline constexpr int kPoolBlock = 64;
inline constexpr int kPoolBlocksPerSm = 16;

// SUM / MEAN: one warp per bag, in blocks of kPoolBlock threads; ids in order, a tile of the
// row in registers. Outputs are written as kOut (o.type; store_tile).
template <uint32_t kVec, class Rows, ValueType kOut = ValueType::kFloat32>
__global__ void __launch_bounds__(kPoolBlock, kPoolBlocksPerSm)
    pool_kernel(LookupFeature x, Rows rows, LookupOutput o) {
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
    store_tile<kVec, kOut>(out, tile, width, lane, acc);
  }
}

// pool_kernel for rows of one tile (dim <= kTileWidth) and fewer than 2^32 ids, with each warp
// walking bags b, b + W, b + 2W, ... (W: the grid's warps) and the chain of dependent loads of
// later bags issued while the current bag's rows load: the offsets of the warp's next 32 bags a
// lane each, the next-but-one bag's ids and the next bag's row addresses one bag ahead. A bag's
// sum is the same loop as pool_kernel's (add_terms), so the output is bit-identical.
template <uint32_t kVec, class Rows, ValueType kOut = ValueType::kFloat32>
__global__ void __launch_bounds__(kPoolBlock, kPoolBlocksPerSm)
    pool_ahead_kernel(LookupFeature x, Rows rows, LookupOutput o) {
  const size_t warps = static_cast<size_t>(gridDim.x) * (kPoolBlock / 32);
  const size_t first = warp_index();
  const size_t bags = x.num_bags;
  if (first >= bags) return;
  const uint32_t lane = lane_index();
  const uint32_t width = x.dim;
  // Lane j holds the offsets of the warp's bag `batch + j` (bag first + (batch + j) * warps).
  uint32_t batch = 0, lane_begin = 0, lane_end = 0;
  const auto load_batch = [&](uint32_t from) {
    batch = from;
    const size_t b = first + static_cast<size_t>(from + lane) * warps;
    if (b < bags) {
      lane_begin = static_cast<uint32_t>(x.offsets[b]);
      lane_end = static_cast<uint32_t>(x.offsets[b + 1]);
    }
  };
  // The offsets of the warp's j-th bag (j in [batch, batch + 32)), from the lane holding them.
  const auto bounds = [&](uint32_t j, uint32_t& begin, uint32_t& end) {
    begin = __shfl_sync(0xFFFFFFFFu, lane_begin, j - batch);
    end = __shfl_sync(0xFFFFFFFFu, lane_end, j - batch);
  };
  load_batch(0);
  // Bag j = 0 (summed now) and j = 1 (its ids, loaded one bag ahead).
  uint32_t begin0, end0, begin1 = 0, end1 = 0;
  bounds(0, begin0, end0);
  uint32_t id0 = 0, id1 = 0;
  if (lane < end0 - begin0) id0 = x.indices[begin0 + lane];
  const bool has1 = first + warps < bags;
  if (has1) {
    bounds(1, begin1, end1);
    if (lane < end1 - begin1) id1 = x.indices[begin1 + lane];
  }
  typename Rows::Handle h0{};
  float f0 = 0.0f;
  if (lane < end0 - begin0) {
    h0 = rows.handle(id0);
    f0 = id_factor(x, begin0 + lane, end0 - begin0);
  }
  for (uint32_t j = 0;; ++j) {
    const size_t b = first + static_cast<size_t>(j) * warps;
    // Ahead: the next bag's row addresses (its ids came one bag ago), the bag after it's ids.
    const bool next = b + warps < bags;
    typename Rows::Handle h1{};
    float f1 = 0.0f;
    uint32_t begin2 = 0, end2 = 0, id2 = 0;
    if (next) {
      if (lane < end1 - begin1) {
        h1 = rows.handle(id1);
        f1 = id_factor(x, begin1 + lane, end1 - begin1);
      }
      if (b + 2 * warps < bags) {
        if (j + 2 == batch + 32) load_batch(j + 2);
        bounds(j + 2, begin2, end2);
        if (lane < end2 - begin2) id2 = x.indices[begin2 + lane];
      }
    }
    float acc[kTileRegs] = {};
    const uint32_t len = end0 - begin0;
    add_terms<kVec>(acc, len < 32 ? len : 32u, h0, f0, rows, 0, width);
    for (uint32_t from = begin0 + 32; from < end0; from += 32) {
      const uint32_t count = end0 - from < 32 ? end0 - from : 32u;
      typename Rows::Handle h_t{};
      float f_t = 0.0f;
      if (lane < count) {
        h_t = rows.handle(x.indices[from + lane]);
        f_t = id_factor(x, from + lane, len);
      }
      add_terms<kVec>(acc, count, h_t, f_t, rows, 0, width);
    }
    store_tile<kVec, kOut>(o.out + b * o.out_stride, 0, width, lane, acc);
    if (!next) return;
    begin0 = begin1;
    end0 = end1;
    h0 = h1;
    f0 = f1;
    begin1 = begin2;
    end1 = end2;
    id1 = id2;
  }
}

// NONE: one warp per id, out row i = weight_i * row.
template <uint32_t kVec, class Rows, ValueType kOut = ValueType::kFloat32>
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
    store_tile<kVec, kOut>(out, tile, width, lane, v);
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

// One warp per row of at most one chunk: its sum straight into the row gradient (zeros for a
// row no id reads). Hot rows are left to hot_row_kernel. Gradients of kGradType (g.type).
template <uint32_t kVec, ValueType kGradType>
__global__ void cold_row_kernel(LookupFeature x, LookupOutput g, IdGroups groups, HotChunks h,
                                LookupOutput r) {
  const size_t row = warp_index();
  if (row >= x.num_rows) return;
  const uint32_t begin = groups.row_begin[row], end = groups.row_begin[row + 1];
  if (is_hot_row(end - begin)) return;
  sum_ids<kVec, kGradType>(x, g, groups.ids_by_row, h.bag_by_row, begin, end,
                           r.out + row * r.out_stride);
}

// One block per hot row (grid-stride), one thread per element: the row's chunk sums added in
// order.
__global__ void hot_row_kernel(uint32_t dim, HotChunks h, LookupOutput r) {
  const size_t hot = hot_row_count(h);
  for (size_t k = blockIdx.x; k < hot; k += gridDim.x) {
    const uint32_t row = h.hot_rows[k];
    add_hot_row(h, row, dim, r.out + row * r.out_stride);
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
    core::cuda::DeviceArray<unsigned long long> first(2, stream);
    core::cuda::check(cudaMemsetAsync(first.data(), 0xFF, 2 * sizeof(unsigned long long), stream),
                      "validate_lookup: cudaMemsetAsync");
    check_offsets_kernel<<<blocks_for_threads(x.num_bags), kBlock, 0, stream>>>(
        x.offsets, x.num_bags, first.data());
    core::cuda::check_launch("validate_lookup: check_offsets_kernel");
    if (x.num_ids > 0) {
      check_indices_kernel<<<blocks_for_threads(x.num_ids), kBlock, 0, stream>>>(
          x.indices, x.num_ids, x.num_rows, first.data());
      core::cuda::check_launch("validate_lookup: check_indices_kernel");
    }
    unsigned long long bad[2];
    int64_t ends[2];
    core::cuda::check(
        cudaMemcpyAsync(bad, first.data(), sizeof bad, cudaMemcpyDeviceToHost, stream),
        "validate_lookup: read checks");
    core::cuda::check(
        cudaMemcpyAsync(&ends[0], x.offsets, sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
        "validate_lookup: read offsets[0]");
    core::cuda::check(cudaMemcpyAsync(&ends[1], x.offsets + x.num_bags, sizeof(int64_t),
                                      cudaMemcpyDeviceToHost, stream),
                      "validate_lookup: read last offset");
    core::cuda::sync(stream, "validate_lookup");
    if (ends[0] != 0) throw_bad_first_offset(where, f, ends[0]);
    if (bad[0] != ULLONG_MAX) {
      int64_t pair[2];
      core::cuda::check(
          cudaMemcpy(pair, x.offsets + bad[0] - 1, sizeof pair, cudaMemcpyDeviceToHost),
          "validate_lookup: read bad offset");
      throw_decreasing_offset(where, f, bad[0], pair[1], pair[0]);
    }
    if (static_cast<size_t>(ends[1]) != x.num_ids) {
      throw_bad_last_offset(where, f, x.num_bags, ends[1], x.num_ids);
    }
    if (bad[1] != ULLONG_MAX) {
      uint32_t value;
      core::cuda::check(
          cudaMemcpy(&value, x.indices + bad[1], sizeof value, cudaMemcpyDeviceToHost),
          "validate_lookup: read bad index");
      throw_bad_index(where, f, bad[1], value, x.num_rows);
    }
  }
}

namespace {

// Launches the pooling kernels of one feature whose rows `rows` gives, writing kOut outputs.
template <ValueType kOut = ValueType::kFloat32, class Rows>
void launch_pool(const LookupFeature& x, const Rows& rows, const LookupOutput& o, bool vec,
                 cudaStream_t stream) {
  if (x.mode == PoolingMode::kNone) {
    if (x.num_ids == 0) return;
    const unsigned blocks = blocks_for_warps(x.num_ids);
    if (vec) {
      pool_none_kernel<4, Rows, kOut><<<blocks, kBlock, 0, stream>>>(x, rows, o);
    } else {
      pool_none_kernel<1, Rows, kOut><<<blocks, kBlock, 0, stream>>>(x, rows, o);
    }
  } else {
    const unsigned blocks = static_cast<unsigned>((x.num_bags * 32 + kPoolBlock - 1) / kPoolBlock);
    if constexpr (Rows::kByAddress) {
      if (x.pool_ahead && x.dim <= kTileWidth && x.num_ids < (size_t{1} << 32)) {
        // Resident blocks only (each warp walks its bags): kPoolBlocksPerSm a multiprocessor.
        static const unsigned resident = [] {
          int device = 0, count = 0;
          core::cuda::check(cudaGetDevice(&device), "cudaGetDevice");
          core::cuda::check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
                            "cudaDeviceGetAttribute (multiprocessors)");
          return static_cast<unsigned>(count * kPoolBlocksPerSm);
        }();
        const unsigned ahead_blocks = std::min(blocks, resident);
        if (vec) {
          pool_ahead_kernel<4, Rows, kOut><<<ahead_blocks, kPoolBlock, 0, stream>>>(x, rows, o);
        } else {
          pool_ahead_kernel<1, Rows, kOut><<<ahead_blocks, kPoolBlock, 0, stream>>>(x, rows, o);
        }
        core::cuda::check_launch("pooled_lookup: pool_ahead_kernel");
        return;
      }
    }
    if (vec) {
      pool_kernel<4, Rows, kOut><<<blocks, kPoolBlock, 0, stream>>>(x, rows, o);
    } else {
      pool_kernel<1, Rows, kOut><<<blocks, kPoolBlock, 0, stream>>>(x, rows, o);
    }
  }
  core::cuda::check_launch("pooled_lookup: pool_kernel");
}

// The pooling kernels of a feature whose rows hold 16-bit elements (x.value_type), its outputs
// float32 or of the rows' type (o.type).
void launch_packed_pool(const LookupFeature& x, const LookupOutput& o, bool out_vec,
                        cudaStream_t stream) {
  const auto typed = [&](auto type) {
    constexpr ValueType kType = decltype(type)::value;
    const auto to = [&](const auto& rows) {
      if (o.type == kType) {
        launch_pool<kType>(x, rows, o, out_vec, stream);
      } else {
        launch_pool(x, rows, o, out_vec, stream);
      }
    };
    if (x.row_ptrs != nullptr) {
      to(ops::cuda::AddressedRowsOf<kType>{x.row_ptrs});
    } else {
      to(ops::cuda::DenseRowsOf<kType>{x.rows, x.row_stride});
    }
  };
  if (x.value_type == ValueType::kBFloat16) {
    typed(std::integral_constant<ValueType, ValueType::kBFloat16>{});
  } else {
    typed(std::integral_constant<ValueType, ValueType::kFloat16>{});
  }
}

}  // namespace

void pooled_lookup_cuda(std::span<const LookupFeature> features,
                        std::span<const LookupOutput> outputs, StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    const LookupOutput& o = outputs[f];
    if (x.num_bags == 0) continue;
    // 16-bit outputs: kVec = 4 where a row's elements come in fours (store_tile falls back to
    // one by one where a row is not 8-byte aligned).
    const bool out_vec = o.type == ValueType::kFloat32
                             ? ops::cuda::vec4_ok(o.out, o.out_stride, x.dim)
                             : x.dim % 4 == 0;
    if (x.value_type != ValueType::kFloat32) {
      launch_packed_pool(x, o, out_vec, stream);
      continue;
    }
    if (x.row_ptrs != nullptr) {
      // Rows by address: float4 lanes where dim allows; a misaligned row is read per element.
      launch_pool(x, AddressedRows{x.row_ptrs}, o, out_vec && x.dim % 4 == 0, stream);
    } else {
      const bool vec = out_vec && ops::cuda::vec4_ok(x.rows, x.row_stride, x.dim);
      launch_pool(x, DenseRows{x.rows, x.row_stride}, o, vec, stream);
    }
  }
}

void reduce_gradients_grouped_cuda(const LookupFeature& x, IdGroups groups, const LookupOutput& g,
                                   const LookupOutput& r, StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  if (x.num_rows == 0) return;
  ops::cuda::keep_pool_memory(stream);
  const ops::cuda::HotChunkPlan plan(x, groups);
  core::cuda::DeviceArray<uint8_t> scratch(plan.bytes(), stream);
  const HotChunks h = plan.issue(g, scratch.data(), stream);
  const bool vec =
      ops::cuda::gradients_vec4_ok(g, x.dim) && ops::cuda::vec4_ok(r.out, r.out_stride, x.dim);
  const unsigned blocks = blocks_for_warps(x.num_rows);
  const auto cold = [&](auto grad_type) {
    constexpr ValueType kGradType = decltype(grad_type)::value;
    if (vec) {
      cold_row_kernel<4, kGradType><<<blocks, kBlock, 0, stream>>>(x, g, groups, h, r);
    } else {
      cold_row_kernel<1, kGradType><<<blocks, kBlock, 0, stream>>>(x, g, groups, h, r);
    }
  };
  ops::cuda::with_gradient_type(g.type, cold);
  core::cuda::check_launch("reduce_gradients: cold_row_kernel");
  if (x.num_ids > 0) {
    constexpr int kHotBlock = 128;
    const unsigned hot_blocks = static_cast<unsigned>(std::min<size_t>(h.max_hot_rows, 2048));
    hot_row_kernel<<<hot_blocks, kHotBlock, 0, stream>>>(x.dim, h, r);
    core::cuda::check_launch("reduce_gradients: hot_row_kernel");
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
    core::cuda::DeviceArray<uint32_t> ids(n, stream), sorted_ids(n, stream), sorted_rows(n, stream),
        row_begin(x.num_rows + 1, stream);
    if (n > 0) {
      size_t sort_bytes = 0;
      const int bits = bits_for(x.num_rows);
      core::cuda::check(cub::DeviceRadixSort::SortPairs(
                            nullptr, sort_bytes, x.indices, sorted_rows.data(), ids.data(),
                            sorted_ids.data(), static_cast<int>(n), 0, bits, stream),
                        "reduce_gradients: SortPairs (size)");
      core::cuda::DeviceArray<uint8_t> temp(sort_bytes, stream);
      ops::cuda::fill_iota(ids.data(), n, stream);
      core::cuda::check(cub::DeviceRadixSort::SortPairs(
                            temp.data(), sort_bytes, x.indices, sorted_rows.data(), ids.data(),
                            sorted_ids.data(), static_cast<int>(n), 0, bits, stream),
                        "reduce_gradients: SortPairs");
    }
    row_begin_kernel<<<blocks_for_threads(n + 1), kBlock, 0, stream>>>(
        sorted_rows.data(), n, x.num_rows, row_begin.data());
    core::cuda::check_launch("reduce_gradients: row_begin_kernel");
    reduce_gradients_grouped_cuda(x, {sorted_ids.data(), row_begin.data()}, grads[f], row_grads[f],
                                  stream_handle);
  }
}

}  // namespace dynemb::ops::detail

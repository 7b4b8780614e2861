// How a warp gathers rows tile by tile into registers (the pooled lookup's forward and the
// gradient reduction's chunk sums share it): row handles passed lane to lane, tiles loaded ahead
// of their additions, each product and sum rounded once in ascending id order, so results are
// bit-identical to the CPU backend's.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/launch.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/value_type.hpp"
#include "dynemb/ops/pooling.hpp"
#include "id_factor.hpp"

namespace dynemb::ops::cuda {

// Rows in the dense layout: row r at base + r * stride (words); a lane passes a row on as its
// index. Elements are kType (16-bit types packed two a word).
template <ValueType kType = ValueType::kFloat32>
struct DenseRowsOf {
  const float* base;
  size_t stride;
  using Handle = uint32_t;
  static constexpr bool kByAddress = false;
  static constexpr ValueType kValueType = kType;
  __device__ Handle handle(uint32_t r) const { return r; }
  __device__ const float* at(Handle h) const { return base + h * stride; }
};

using DenseRows = DenseRowsOf<ValueType::kFloat32>;

// Rows by address: row r at ptrs[r] (nullptr: zeros); a lane passes a row on as its address.
// Elements are kType.
template <ValueType kType = ValueType::kFloat32>
struct AddressedRowsOf {
  const float* const* ptrs;
  using Handle = const float*;
  static constexpr bool kByAddress = true;
  static constexpr ValueType kValueType = kType;
  __device__ Handle handle(uint32_t r) const { return ptrs[r]; }
  __device__ const float* at(Handle h) const { return h; }
};

using AddressedRows = AddressedRowsOf<ValueType::kFloat32>;

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
  if constexpr (Rows::kValueType != ValueType::kFloat32) {
    // 16-bit elements, converted exactly to float32: a lane's 4 consecutive elements (kVec = 4)
    // as one 8-byte load where the row allows, else one by one into kVec's layout.
    if constexpr (kVec == 4) {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + tile + 4 * lane;
      if (row != nullptr && 4 * lane + 3 < width && reinterpret_cast<uintptr_t>(p) % 8 == 0) {
        const uint2 packed = *reinterpret_cast<const uint2*>(p);
        v[0] = from_bits16<Rows::kValueType>(static_cast<uint16_t>(packed.x & 0xFFFFu));
        v[1] = from_bits16<Rows::kValueType>(static_cast<uint16_t>(packed.x >> 16));
        v[2] = from_bits16<Rows::kValueType>(static_cast<uint16_t>(packed.y & 0xFFFFu));
        v[3] = from_bits16<Rows::kValueType>(static_cast<uint16_t>(packed.y >> 16));
        return;
      }
    }
#pragma unroll
    for (uint32_t q = 0; q < kTileRegs; ++q) {
      const uint32_t j = TileLanes<kVec>::element(lane, q);
      v[q] = row != nullptr && j < width ? load_element<Rows::kValueType>(row, tile + j) : 0.0f;
    }
    return;
  }
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

// A lane's 4 consecutive 16-bit elements (kVec = 4's layout) of tile [tile, tile + width) of
// `row`, as their bits: one 8-byte load where the row allows, else one by one (0 bits, +0.0, for
// a null row or past width).
template <ValueType kType>
__device__ __forceinline__ uint2 load_packed4(const float* row, uint32_t tile, uint32_t width,
                                              uint32_t lane) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + tile + 4 * lane;
  if (row != nullptr && 4 * lane + 3 < width && reinterpret_cast<uintptr_t>(p) % 8 == 0) {
    return *reinterpret_cast<const uint2*>(p);
  }
  uint32_t bits[4] = {0, 0, 0, 0};
#pragma unroll
  for (uint32_t q = 0; q < 4; ++q) {
    if (row != nullptr && 4 * lane + q < width) bits[q] = p[q];
  }
  return uint2{bits[0] | (bits[1] << 16), bits[2] | (bits[3] << 16)};
}

// The four elements of load_packed4's bits, converted exactly to float32.
template <ValueType kType>
__device__ __forceinline__ void unpack4(uint2 packed, float (&v)[kTileRegs]) {
  v[0] = from_bits16<kType>(static_cast<uint16_t>(packed.x & 0xFFFFu));
  v[1] = from_bits16<kType>(static_cast<uint16_t>(packed.x >> 16));
  v[2] = from_bits16<kType>(static_cast<uint16_t>(packed.y & 0xFFFFu));
  v[3] = from_bits16<kType>(static_cast<uint16_t>(packed.y >> 16));
}

// Adds `count` (<= 32) terms in order to the lane's registers of one tile: term t (held by lane
// t: h_t, f_t) is f_t times the row `rows` gives for handle h_t, from element `tile`, `width`
// elements. Loads are issued kUnroll terms ahead of their additions.
// 16-bit rows (kVec = 4) take twice the terms in flight, their bits held packed; kPacked false
// (where registers are short: the fused backward's cold rows reading 16-bit gradients) keeps
// 4 terms in flight, the same additions in the same order.
template <uint32_t kVec, class Rows, bool kPacked = true>
__device__ __forceinline__ void add_terms(float (&acc)[kTileRegs], uint32_t count,
                                          typename Rows::Handle h_t, float f_t, const Rows& rows,
                                          uint32_t tile, uint32_t width) {
  constexpr uint32_t kUnroll = 4;
  const uint32_t lane = lane_index();
  uint32_t t = 0;
  if constexpr (kPacked && Rows::kValueType != ValueType::kFloat32 && kVec == 4) {
    // 16-bit rows move half the bytes a load: twice the terms in flight (their bits held
    // packed, so as many registers as float32's), added in the same order.
    constexpr uint32_t kPackedUnroll = 2 * kUnroll;
    for (; t + kPackedUnroll <= count; t += kPackedUnroll) {
      uint2 packed[kPackedUnroll];
      float f[kPackedUnroll];
#pragma unroll
      for (uint32_t u = 0; u < kPackedUnroll; ++u) {
        const typename Rows::Handle h = shuffle(h_t, t + u);
        f[u] = __shfl_sync(0xFFFFFFFFu, f_t, t + u);
        packed[u] = load_packed4<Rows::kValueType>(rows.at(h), tile, width, lane);
      }
#pragma unroll
      for (uint32_t u = 0; u < kPackedUnroll; ++u) {
        float v[kTileRegs];
        unpack4<Rows::kValueType>(packed[u], v);
        add_scaled(acc, f[u], v);
      }
    }
  }
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
  return detail::id_factor(x, i, len);
}

// Whether a reduction may read gradients g (dim elements a row) with kVec = 4: float32 rows need
// float4 alignment (vec4_ok); 16-bit rows only elements in fours (load_packed4 reads a row that is
// not 8-byte aligned element by element).
inline bool gradients_vec4_ok(const LookupOutput& g, uint32_t dim) {
  return g.type == ValueType::kFloat32 ? vec4_ok(g.out, g.out_stride, dim) : dim % 4 == 0;
}

// Calls f(std::integral_constant<ValueType, type>{}): a kernel's gradient type chosen at run time.
template <class F>
void with_gradient_type(ValueType type, const F& f) {
  switch (type) {
    case ValueType::kFloat16:
      return f(std::integral_constant<ValueType, ValueType::kFloat16>{});
    case ValueType::kBFloat16:
      return f(std::integral_constant<ValueType, ValueType::kBFloat16>{});
    default:
      return f(std::integral_constant<ValueType, ValueType::kFloat32>{});
  }
}

// Stores the lane's elements (kVec's layout) of tile [tile, tile + width) of the output row at
// `row` (32-bit words): float32 as TileLanes::store does, 16-bit types (kOut) each rounded to
// nearest even, a lane's 4 elements as one 8-byte store where the row allows, else one by one.
template <uint32_t kVec, ValueType kOut>
__device__ __forceinline__ void store_tile(float* row, uint32_t tile, uint32_t width, uint32_t lane,
                                           const float (&acc)[kTileRegs]) {
  if constexpr (kOut == ValueType::kFloat32) {
    TileLanes<kVec>::store(row + tile, width, lane, acc);
  } else {
    uint16_t* p = reinterpret_cast<uint16_t*>(row) + tile;
    if constexpr (kVec == 4) {
      if (4 * lane + 3 < width && reinterpret_cast<uintptr_t>(p + 4 * lane) % 8 == 0) {
        const uint32_t lo = to_bits16<kOut>(acc[0]) | (uint32_t{to_bits16<kOut>(acc[1])} << 16);
        const uint32_t hi = to_bits16<kOut>(acc[2]) | (uint32_t{to_bits16<kOut>(acc[3])} << 16);
        *reinterpret_cast<uint2*>(p + 4 * lane) = uint2{lo, hi};
        return;
      }
    }
#pragma unroll
    for (uint32_t q = 0; q < kTileRegs; ++q) {
      const uint32_t j = TileLanes<kVec>::element(lane, q);
      if (j < width) p[j] = to_bits16<kOut>(acc[q]);
    }
  }
}

// The sum, from zero and in ascending id order, of ids_by_row[begin, end) into `out` (dim
// floats, in kVec's layout): each id's bag gradient (NONE: its own) times its factor, the
// gradients g's rows of kGradType elements (g.type: float32, or 16-bit packed two a word, each
// converted to float32 as it is read). bag_by_row[k] is the bag of id ids_by_row[k] (SUM /
// MEAN), so the two loads do not wait on each other; ids_by_row is read only where the id
// matters (weights, or NONE: the id is the row), and may then be null. kPacked: add_terms'.
template <uint32_t kVec, ValueType kGradType = ValueType::kFloat32, bool kPacked = true>
__device__ __forceinline__ void sum_ids(const LookupFeature& x, const LookupOutput& g,
                                        const uint32_t* ids_by_row, const uint32_t* bag_by_row,
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
        const bool reads_id = x.weights != nullptr || x.mode == PoolingMode::kNone;
        const uint32_t i = reads_id ? ids_by_row[first + lane] : 0;
        const uint32_t b = x.mode == PoolingMode::kNone ? 0 : bag_by_row[first + lane];
        row_t = x.mode == PoolingMode::kNone ? i : b;
        f_t = factor_of(x, i, b);
      }
      add_terms<kVec, DenseRowsOf<kGradType>, kPacked>(
          acc, count, row_t, f_t, DenseRowsOf<kGradType>{g.out, g.out_stride}, tile, width);
    }
    TileLanes<kVec>::store(out + tile, width, lane, acc);
  }
}

}  // namespace dynemb::ops::cuda

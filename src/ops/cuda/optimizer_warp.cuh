// The 32 lanes of a warp sharing one row of the fused optimizer (apply_optimizer_on in
// include/dynemb/ops/optimizer.hpp): lane l updates elements l, l + 32, ..., so a warp reads
// and writes the row's embedding and state coalesced; row sums go by shuffle. The row update of
// every optimizer kernel (by index, by address, fused with the gradient reduction) is update_row,
// so they all round the same.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/launch.cuh"
#include "dynemb/ops/optimizer.hpp"

namespace dynemb::ops::cuda {

struct WarpLanes {
  uint32_t lane;
  __device__ uint32_t first() const { return lane; }
  __device__ uint32_t stride() const { return 32; }
  // The lane's partial sum of term(j), j = lane, lane + 32, ... ascending, then the xor butterfly
  // (SingleLane::sum_over rounds the same way on the host).
  template <class Term>
  __device__ float sum_over(uint32_t dim, const Term& term) const {
    float v = 0.0f;
    for (uint32_t j = lane; j < dim; j += kRowSumLanes) v += term(j);
    for (uint32_t offset = kRowSumLanes / 2; offset > 0; offset >>= 1)
      v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
  }
  __device__ void sync() const { __syncwarp(); }
  __device__ bool leader() const { return lane == 0; }
};

// Whether the warp's gradient row (dim floats) holds a NaN or Inf (every lane gets the answer).
template <uint32_t kVec>
__device__ bool row_nonfinite(const float* grad, uint32_t dim) {
  bool bad = false;
  if constexpr (kVec == 4) {
    for (uint32_t j = 4 * lane_index(); j < dim; j += 128) {
      const float4 g = *reinterpret_cast<const float4*>(grad + j);
      bad |= !isfinite(g.x) || !isfinite(g.y) || !isfinite(g.z) || !isfinite(g.w);
    }
  } else {
    for (uint32_t j = lane_index(); j < dim; j += 32) bad |= !isfinite(grad[j]);
  }
  return __any_sync(0xFFFFFFFFu, bad);
}

// row_nonfinite that also adds the row to *nonfinite (once, by lane 0) when it is bad.
template <uint32_t kVec>
__device__ bool gradient_nonfinite(const float* grad, uint32_t dim, unsigned long long* nonfinite) {
  if (!row_nonfinite<kVec>(grad, dim)) return false;
  if (lane_index() == 0) atomicAdd(nonfinite, 1ull);
  return true;
}

// The element pass of one row with float4 lanes: lane l holds elements 4 l .. 4 l + 3 of each
// 128-element tile of w, the state arrays and the gradient. The lane's first tile is loaded
// before `begin` (begin_row_update, which reads the row's scalars) runs, so the two reads' trips
// to memory overlap; the arithmetic is the same as without. Returns begin's RowUpdate.
template <OptimizerKind kKind, class Begin>
__device__ RowUpdate update_row_vec4(const OptimizerOptions& o, const Begin& begin, float* row,
                                     const float* grad, uint32_t dim) {
  constexpr uint32_t kArrays = element_state_arrays(kKind);
  uint32_t j = 4 * lane_index();
  float4 w{}, a{}, b{}, g{};
  const auto load = [&] {
    w = *reinterpret_cast<const float4*>(row + j);
    g = *reinterpret_cast<const float4*>(grad + j);
    if constexpr (kArrays >= 1) a = *reinterpret_cast<const float4*>(row + dim + j);
    if constexpr (kArrays >= 2) b = *reinterpret_cast<const float4*>(row + 2 * dim + j);
  };
  if (j < dim) load();
  const RowUpdate u = begin();
  while (j < dim) {
    update_element<kKind>(o, u, w.x, a.x, b.x, g.x);
    update_element<kKind>(o, u, w.y, a.y, b.y, g.y);
    update_element<kKind>(o, u, w.z, a.z, b.z, g.z);
    update_element<kKind>(o, u, w.w, a.w, b.w, g.w);
    *reinterpret_cast<float4*>(row + j) = w;
    if constexpr (kArrays >= 1) *reinterpret_cast<float4*>(row + dim + j) = a;
    if constexpr (kArrays >= 2) *reinterpret_cast<float4*>(row + 2 * dim + j) = b;
    j += 128;
    if (j < dim) load();
  }
  return u;
}

// The 4 16-bit kState elements packed in `bits` (load_state4's 8-byte word) as floats.
template <ValueType kState>
__device__ __forceinline__ void decode_state4(uint2 bits, float (&v)[4]) {
  v[0] = from_bits16<kState>(static_cast<uint16_t>(bits.x & 0xFFFFu));
  v[1] = from_bits16<kState>(static_cast<uint16_t>(bits.x >> 16));
  v[2] = from_bits16<kState>(static_cast<uint16_t>(bits.y & 0xFFFFu));
  v[3] = from_bits16<kState>(static_cast<uint16_t>(bits.y >> 16));
}

// A lane's 4 consecutive kState elements j .. j + 3 of the state array at `a` (float4, or one
// 8-byte load of 16-bit elements) into v; returns the 16-bit elements' bits (float32: zeros).
// kDecode false (16-bit only): v is left as it is, for decode_state4 later.
template <ValueType kState, bool kDecode = true>
__device__ __forceinline__ uint2 load_state4(const float* a, uint32_t j, float (&v)[4]) {
  if constexpr (kState == ValueType::kFloat32) {
    const float4 f = *reinterpret_cast<const float4*>(a + j);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    return uint2{0, 0};
  } else {
    const uint2 packed = *reinterpret_cast<const uint2*>(reinterpret_cast<const uint16_t*>(a) + j);
    if constexpr (kDecode) decode_state4<kState>(packed, v);
    return packed;
  }
}

// Stores load_state4's elements back: float32 as is; 16-bit each rounded as store_state does
// (stochastically, from its old bits in `old` and salt + k for element j + k), in one 8-byte
// store.
template <ValueType kState>
__device__ __forceinline__ void store_state4(float* a, uint32_t j, const float (&v)[4],
                                             uint32_t salt, uint2 old) {
  if constexpr (kState == ValueType::kFloat32) {
    *reinterpret_cast<float4*>(a + j) = float4{v[0], v[1], v[2], v[3]};
  } else {
    auto* p = reinterpret_cast<uint2*>(reinterpret_cast<uint16_t*>(a) + j);
    const uint16_t o[4] = {
        static_cast<uint16_t>(old.x & 0xFFFFu), static_cast<uint16_t>(old.x >> 16),
        static_cast<uint16_t>(old.y & 0xFFFFu), static_cast<uint16_t>(old.y >> 16)};
    uint32_t bits[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k)
      bits[k] = to_bits16_stochastic<kState>(v[k], rounding_bits(v[k], o[k], salt + k));
    *p = uint2{bits[0] | (bits[1] << 16), bits[2] | (bits[3] << 16)};
  }
}

// update_row_elements of a row of kType weights with 4 elements a lane: elements 4 l .. 4 l + 3
// of each 128, the weights as one 8-byte load and store, the gradient as float4s and the state
// arrays (kState elements) as float4s or 8-byte words (row 16-byte aligned, dim % 8 == 0 so the
// state is too). The first tile is loaded before `begin` runs, as in update_row_vec4. Each
// element's arithmetic and rounding is update_row_elements', so the rows end bit-identical to
// it. Returns begin's RowUpdate.
// kLateDecode (16-bit state): the state's bits are loaded with the tile but turned into floats
// only after `begin`, so across begin's registers (Adam's bias corrections) a lane holds 4 words
// of state instead of 12; the same values, so the same results.
template <OptimizerKind kKind, ValueType kType, ValueType kState = ValueType::kFloat32,
          bool kLateDecode = false, class Begin>
__device__ RowUpdate update_packed_row_vec4(const OptimizerOptions& o, const Begin& begin,
                                            float* row, const float* grad, uint32_t dim) {
  constexpr bool kDecodeWithLoad = !kLateDecode || kState == ValueType::kFloat32;
  constexpr uint32_t kArrays = element_state_arrays(kKind);
  float* a = row + value_words(kType, dim);
  float* b = a + value_words(kState, dim);
  auto* weights = reinterpret_cast<uint16_t*>(row);
  uint32_t j = 4 * lane_index();
  uint2 packed{}, old_a{}, old_b{};
  float4 g4{};
  float sa[4] = {}, sb[4] = {};
  const auto load = [&] {
    packed = *reinterpret_cast<const uint2*>(weights + j);
    g4 = *reinterpret_cast<const float4*>(grad + j);
    if constexpr (kArrays >= 1) old_a = load_state4<kState, kDecodeWithLoad>(a, j, sa);
    if constexpr (kArrays >= 2) old_b = load_state4<kState, kDecodeWithLoad>(b, j, sb);
  };
  if (j < dim) load();
  const RowUpdate u = begin();
  while (j < dim) {
    if constexpr (!kDecodeWithLoad) {
      if constexpr (kArrays >= 1) decode_state4<kState>(old_a, sa);
      if constexpr (kArrays >= 2) decode_state4<kState>(old_b, sb);
    }
    const uint16_t old[4] = {
        static_cast<uint16_t>(packed.x & 0xFFFFu), static_cast<uint16_t>(packed.x >> 16),
        static_cast<uint16_t>(packed.y & 0xFFFFu), static_cast<uint16_t>(packed.y >> 16)};
    const float g[4] = {g4.x, g4.y, g4.z, g4.w};
    uint16_t bits[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
      float w = from_bits16<kType>(old[k]);
      update_element<kKind>(o, u, w, sa[k], sb[k], g[k]);
      bits[k] = o.stochastic_rounding
                    ? to_bits16_stochastic<kType>(w, rounding_bits(w, old[k], j + k))
                    : to_bits16<kType>(w);
    }
    *reinterpret_cast<uint2*>(weights + j) =
        uint2{bits[0] | (static_cast<uint32_t>(bits[1]) << 16),
              bits[2] | (static_cast<uint32_t>(bits[3]) << 16)};
    if constexpr (kArrays >= 1) store_state4<kState>(a, j, sa, dim + j, old_a);
    if constexpr (kArrays >= 2) store_state4<kState>(b, j, sb, 2 * dim + j, old_b);
    j += 128;
    if (j < dim) load();
  }
  return u;
}

// Which optimizer-state types a kernel's row update is compiled for: either (o.state_in_value_type
// chooses at run time), only float32, or only the row's type (16-bit state, decoded late:
// update_packed_row_vec4). A kernel compiled for one holds only that path's registers.
enum class StateTypes { kEither, kFloat32, kRowTypeLateDecode };

// update_row of a row of kType weights (16-bit): with vec4 (see update_packed_row_vec4) 4
// elements a lane, else lane l takes elements l, l + 32, ..., two lanes writing the halves of one
// word apart. kStates kFloat32: o.state_in_value_type must be unset; kRowTypeLateDecode: set.
template <OptimizerKind kKind, ValueType kType, StateTypes kStates = StateTypes::kEither>
__device__ __forceinline__ void update_typed_row(const OptimizerOptions& o, float* row,
                                                 const float* grad, uint32_t dim,
                                                 const WarpLanes& lanes, bool vec4) {
  const auto begin = [&] { return begin_row_update<WarpLanes, kType>(o, row, grad, dim, lanes); };
  RowUpdate u;
  if constexpr (kStates == StateTypes::kFloat32) {
    if (vec4) {
      u = update_packed_row_vec4<kKind, kType, ValueType::kFloat32>(o, begin, row, grad, dim);
    } else {
      u = begin();
      update_row_elements_as<kKind, WarpLanes, kType, ValueType::kFloat32>(o, u, row, grad, dim,
                                                                           lanes);
    }
  } else if constexpr (kStates == StateTypes::kRowTypeLateDecode) {
    if (vec4) {
      u = update_packed_row_vec4<kKind, kType, kType, true>(o, begin, row, grad, dim);
    } else {
      u = begin();
      update_row_elements_as<kKind, WarpLanes, kType, kType>(o, u, row, grad, dim, lanes);
    }
  } else if (vec4 && o.state_in_value_type) {
    u = update_packed_row_vec4<kKind, kType, kType>(o, begin, row, grad, dim);
  } else if (vec4) {
    u = update_packed_row_vec4<kKind, kType, ValueType::kFloat32>(o, begin, row, grad, dim);
  } else {
    u = begin();
    update_row_elements<kKind, WarpLanes, kType>(o, u, row, grad, dim, lanes);
  }
  end_row_update<WarpLanes, kType>(o, u, row, dim, lanes);
}

// update_typed_row for a kernel compiled for float32 rows that meets 16-bit ones (o.value_type).
// Not inlined, so the float32 path of the kernels that call update_row keeps its registers.
template <OptimizerKind kKind>
__device__ __noinline__ void update_packed_row(const OptimizerOptions& o, float* row,
                                               const float* grad, uint32_t dim,
                                               const WarpLanes& lanes, bool vec4) {
  const auto typed = [&](auto type) {
    constexpr ValueType kType = decltype(type)::value;
    update_typed_row<kKind, kType>(o, row, grad, dim, lanes, vec4);
  };
  if (o.value_type == ValueType::kBFloat16) {
    typed(std::integral_constant<ValueType, ValueType::kBFloat16>{});
  } else {
    typed(std::integral_constant<ValueType, ValueType::kFloat16>{});
  }
}

// Applies the kKind update of `grad` (dim floats) to `row` = [w | state] with the whole warp.
// kVec = 4: float4 lanes (grad 16-byte aligned, dim % 4 == 0; the row too unless kByAddress, where
// a row not 16-byte aligned takes the per-element path); 1: lane l takes elements l, l + 32, ....
// Both paths do the same arithmetic per element.
// kType: the rows' value type when the kernel is compiled for it (the 16-bit update inlined).
// kTypeAtRunTime (with kType float32, the default): the rows may also hold 16-bit weights
// (o.value_type), updated out of line; a kernel compiled per value type passes false, so its
// float32 form carries no call (whose frame cost it registers and spills).
// kStates (16-bit kType): which state types the update is compiled for (update_typed_row).
template <OptimizerKind kKind, uint32_t kVec, bool kByAddress,
          ValueType kType = ValueType::kFloat32, bool kTypeAtRunTime = true,
          StateTypes kStates = StateTypes::kEither>
__device__ void update_row(const OptimizerOptions& o, float* row, const float* grad, uint32_t dim) {
  const WarpLanes lanes{lane_index()};
  const bool vec4_packed = kVec == 4 && dim % 8 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0;
  if constexpr (kType != ValueType::kFloat32) {
    update_typed_row<kKind, kType, kStates>(o, row, grad, dim, lanes, vec4_packed);
  } else {
    if constexpr (kTypeAtRunTime) {
      if (o.value_type != ValueType::kFloat32) {
        update_packed_row<kKind>(o, row, grad, dim, lanes, vec4_packed);
        return;
      }
    }
    const auto begin = [&] { return begin_row_update(o, row, grad, dim, lanes); };
    if constexpr (kVec == 4) {
      if (!kByAddress || reinterpret_cast<uintptr_t>(row) % 16 == 0) {
        const RowUpdate u = update_row_vec4<kKind>(o, begin, row, grad, dim);
        end_row_update(o, u, row, dim, lanes);
        return;
      }
    }
    const RowUpdate u = begin();
    update_row_elements<kKind>(o, u, row, grad, dim, lanes);
    end_row_update(o, u, row, dim, lanes);
  }
}

// Calls f(std::integral_constant<OptimizerKind, kind>{}) for the optimizer kind `kind`, so a
// launcher instantiates its kernel once per kind.
template <class F>
void with_optimizer_kind(OptimizerKind kind, const F& f) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return f(std::integral_constant<OptimizerKind, OptimizerKind::kSgd>{});
    case OptimizerKind::kAdam:
      return f(std::integral_constant<OptimizerKind, OptimizerKind::kAdam>{});
    case OptimizerKind::kAdaGrad:
      return f(std::integral_constant<OptimizerKind, OptimizerKind::kAdaGrad>{});
    case OptimizerKind::kRowWiseAdaGrad:
      return f(std::integral_constant<OptimizerKind, OptimizerKind::kRowWiseAdaGrad>{});
    case OptimizerKind::kRmsProp:
      return f(std::integral_constant<OptimizerKind, OptimizerKind::kRmsProp>{});
    case OptimizerKind::kFtrl:
      return f(std::integral_constant<OptimizerKind, OptimizerKind::kFtrl>{});
  }
}

}  // namespace dynemb::ops::cuda

// The element types an embedding row may store (float32, float16, bfloat16), how a row packs
// them into 32-bit words, and the conversions between them and float32, written once for the
// host and CUDA devices so that both round alike (docs/value_types.md).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "dynemb/core/host_device.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace dynemb {

// What one embedding element is stored as. Arithmetic is always float32.
enum class ValueType : uint8_t { kFloat32, kFloat16, kBFloat16 };

// "float32", "float16", "bfloat16".
std::string to_string(ValueType type);
// Parses "float32" / "fp32", "float16" / "fp16", "bfloat16" / "bf16"; throws InvalidArgument
// naming `where`, `argument`, the value and the allowed names.
ValueType parse_value_type(const std::string& name, const char* where, const char* argument);

// Bytes of one element.
DYNEMB_HD constexpr uint32_t value_bytes(ValueType type) {
  return type == ValueType::kFloat32 ? 4u : 2u;
}

// 32-bit words that hold `elements` elements: 16-bit types two a word (element 2k in the low
// half of word k, then 2k + 1), the last word's high half 0 when `elements` is odd.
DYNEMB_HD constexpr uint32_t value_words(ValueType type, uint32_t elements) {
  return type == ValueType::kFloat32 ? elements : (elements + 1) / 2;
}

namespace value_detail {

DYNEMB_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DYNEMB_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The canonical NaN both conversions to a 16-bit type give (as the GPU's cvt does).
inline constexpr uint16_t kCanonicalNan16 = 0x7FFF;

// float16 bits -> float32 (exact; NaN keeps its payload, quieted).
DYNEMB_HD float half_to_float_host(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F)
    return bits_float(sign | 0x7F800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0));
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  uint32_t e = 113;  // a subnormal: normalize
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_float(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

// float32 -> float16 bits, round to nearest even (overflow to Inf, NaN to kCanonicalNan16).
// `random` != 0 only with `stochastic`: the discarded bits are rounded up with probability
// equal to their fraction of one unit, drawn from `random`.
DYNEMB_HD uint16_t float_to_half_host(float f, bool stochastic = false, uint32_t random = 0) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return kCanonicalNan16;
  if (ax == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (!stochastic && ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half (units of 2^-24) or zero
    const uint32_t e = ax >> 23;
    if (e < 102) {  // below 2^-25: rounds to zero, or up with that tiny chance
      if (!stochastic) return static_cast<uint16_t>(sign);
    }
    const uint32_t m = (ax & 0x7FFFFFu) | (e != 0 ? 0x800000u : 0);
    const uint32_t shift = 126 - e;  // f = m * 2^-shift units of 2^-24; 14 .. 126
    if (shift >= 32) {
      // Below 2^-8 of a unit: rounds up with chance m / 2^shift, i.e. when the 32-bit random
      // is below m / 2^(shift - 32) (zero once that is below one).
      const uint32_t threshold = shift - 32 >= 24 ? 0u : m >> (shift - 32);
      return static_cast<uint16_t>(sign | (random < threshold ? 1u : 0u));
    }
    const uint32_t mask = (1u << shift) - 1;
    uint32_t h = m >> shift;
    const uint32_t rem = m & mask;
    if (stochastic) {
      if (rem + (random & mask) > mask) ++h;
    } else {
      const uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    }
    return static_cast<uint16_t>(sign | h);
  }
  const uint32_t exp = (ax >> 23) - 112;
  const uint32_t mant = ax & 0x7FFFFFu;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (stochastic) {
    if (rem + (random & 0x1FFFu) > 0x1FFFu) ++h;
  } else if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
    ++h;
  }
  // Past the largest finite: Inf from 65536 on (or by nearest-even rounding); a stochastic round
  // below 65536 stays finite.
  if (h >= 0x7C00u) h = stochastic && ax < 0x47800000u ? 0x7BFFu : 0x7C00u;
  return static_cast<uint16_t>(sign | h);
}

// bfloat16 bits -> float32 (exact).
DYNEMB_HD float bf16_to_float_host(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

// float32 -> bfloat16 bits, round to nearest even (NaN to kCanonicalNan16), or stochastically.
DYNEMB_HD uint16_t float_to_bf16_host(float f, bool stochastic = false, uint32_t random = 0) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return kCanonicalNan16;
  if ((x & 0x7FFFFFFFu) == 0x7F800000u) return static_cast<uint16_t>(x >> 16);
  if (stochastic) {
    uint32_t r = x + (random & 0xFFFFu);
    // Never carry a finite value into Inf by chance.
    if ((r & 0x7F800000u) == 0x7F800000u) r = x;
    return static_cast<uint16_t>(r >> 16);
  }
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// A 32-bit mix (murmur3's finalizer) for stochastic rounding's random bits.
DYNEMB_HD uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

}  // namespace value_detail

// float16 bits -> float32, exactly (the GPU's conversion on the device, the same bits on the host
// for every non-NaN input).
DYNEMB_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return value_detail::half_to_float_host(h);
#endif
}

// float32 -> float16 bits, round to nearest even; bit-identical on host and device.
DYNEMB_HD uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return value_detail::float_to_half_host(f);
#endif
}

// bfloat16 bits -> float32, exactly.
DYNEMB_HD float bf16_to_float(uint16_t b) {
  return value_detail::bf16_to_float_host(b);
}

// float32 -> bfloat16 bits, round to nearest even; bit-identical on host and device.
DYNEMB_HD uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  return value_detail::float_to_bf16_host(f);
#endif
}

// float32 -> kType's bits (16-bit types), round to nearest even.
template <ValueType kType>
DYNEMB_HD uint16_t to_bits16(float f) {
  if constexpr (kType == ValueType::kBFloat16) {
    return float_to_bf16(f);
  } else {
    return float_to_half(f);
  }
}

// kType's bits (16-bit types) -> float32.
template <ValueType kType>
DYNEMB_HD float from_bits16(uint16_t b) {
  if constexpr (kType == ValueType::kBFloat16) {
    return bf16_to_float(b);
  } else {
    return half_to_float(b);
  }
}

// float32 -> kType's bits, rounded stochastically with `random` (the same on host and device).
template <ValueType kType>
DYNEMB_HD uint16_t to_bits16_stochastic(float f, uint32_t random) {
  if constexpr (kType == ValueType::kBFloat16) {
    return value_detail::float_to_bf16_host(f, true, random);
  } else {
    return value_detail::float_to_half_host(f, true, random);
  }
}

// `v` rounded to kType and back (float32: v itself).
template <ValueType kType>
DYNEMB_HD float round_to(float v) {
  if constexpr (kType == ValueType::kFloat32) {
    return v;
  } else {
    return from_bits16<kType>(to_bits16<kType>(v));
  }
}

// Element j of a row of kType elements starting at `row` (32-bit words, see value_words).
template <ValueType kType>
DYNEMB_HD float load_element(const float* row, uint32_t j) {
  if constexpr (kType == ValueType::kFloat32) {
    return row[j];
  } else {
    return from_bits16<kType>(reinterpret_cast<const uint16_t*>(row)[j]);
  }
}

// Stores v as element j of a kType row, rounded to nearest even.
template <ValueType kType>
DYNEMB_HD void store_element(float* row, uint32_t j, float v) {
  if constexpr (kType == ValueType::kFloat32) {
    row[j] = v;
  } else {
    reinterpret_cast<uint16_t*>(row)[j] = to_bits16<kType>(v);
  }
}

// Element j of a row of `type` elements (a run-time choice; load_element for kernels).
DYNEMB_HD float load_value(ValueType type, const float* row, uint32_t j) {
  switch (type) {
    case ValueType::kFloat16:
      return load_element<ValueType::kFloat16>(row, j);
    case ValueType::kBFloat16:
      return load_element<ValueType::kBFloat16>(row, j);
    default:
      return row[j];
  }
}

// Stores v as element j of a row of `type` elements, rounded to nearest even.
DYNEMB_HD void store_value(ValueType type, float* row, uint32_t j, float v) {
  switch (type) {
    case ValueType::kFloat16:
      return store_element<ValueType::kFloat16>(row, j, v);
    case ValueType::kBFloat16:
      return store_element<ValueType::kBFloat16>(row, j, v);
    default:
      row[j] = v;
  }
}

// The 32-bit word holding elements 2w and 2w + 1 (as `type`'s bits; float32: element w itself).
DYNEMB_HD uint32_t pack_word(ValueType type, float lo, float hi) {
  if (type == ValueType::kBFloat16)
    return float_to_bf16(lo) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
  return float_to_half(lo) | (static_cast<uint32_t>(float_to_half(hi)) << 16);
}

}  // namespace dynemb

// New rows on the CPU: the same values as core/initializer.hpp's fill_initial_row, bit for bit
// (float32 and 16-bit rows), but drawing each Philox block once per row instead of once per
// element (4 elements share a uniform block, 2 a normal pair) and filling a constant row at once,
// which makes find_or_insert of new keys several times faster.
#pragma once

#include <algorithm>
#include <cstdint>

#include "dynemb/core/initializer.hpp"

namespace dynemb::table::cpu {

namespace row_init_detail {

// Elements [first, last) of the initial row of `key_bits` (first a multiple of 4, last at most
// the drawn width), as float32, into out[0, last - first): initial_value's values, with each
// Philox block drawn once (4 uniform elements a block, 2 normal ones).
inline void draw_elements(const InitializerOptions& init, uint64_t key_bits, uint32_t first,
                          uint32_t last, float* out) {
  using namespace init_detail;
  switch (init.kind) {
    case InitializerKind::kUniform: {
      const float span = det::sub(init.high, init.low);
      for (uint32_t j = first; j < last; j += 4) {
        const Philox4 r = draw(init, key_bits, j >> 2, kUniformStream);
        for (uint32_t t = 0; t < 4 && j + t < last; ++t)
          out[j + t - first] = det::fma(uniform01(r.w[t]), span, init.low);
      }
      break;
    }
    case InitializerKind::kNormal: {
      for (uint32_t j = first; j < last; j += 2) {
        const Philox4 r = draw(init, key_bits, j >> 1, kNormalStream);
        const float radius = det::sqrt(det::mul(-2.0f, det::log(uniform01_open_low(r.w[0]))));
        float s, c;
        det::sincos_2pi(uniform01(r.w[1]), &s, &c);
        out[j - first] = det::fma(det::mul(radius, c), init.stddev, init.mean);
        if (j + 1 < last)
          out[j + 1 - first] = det::fma(det::mul(radius, s), init.stddev, init.mean);
      }
      break;
    }
    case InitializerKind::kConstant:
      std::fill(out, out + (last - first), init.value);
      break;
    default:
      for (uint32_t j = first; j < last; ++j) out[j - first] = initial_value(init, key_bits, j);
  }
}

// A row of `words` 32-bit words of 16-bit elements packed two a word (element 2w in the low half
// of word w), exactly as fill_initial_row packs it: a constant row is one fill of its packed
// pair; other kinds are drawn 64 elements at a time and packed.
inline void write_initial_row_16(const InitializerOptions& init, uint64_t key_bits, float* row,
                                 uint32_t words) {
  using value_detail::bits_float;
  const uint32_t elements = 2 * words;
  const uint32_t drawn = init.width != 0 ? std::min(init.width, elements) : elements;
  if (init.kind == InitializerKind::kConstant) {
    std::fill(row, row + drawn / 2, bits_float(pack_word(init.value_type, init.value, init.value)));
    if (drawn % 2 != 0) row[drawn / 2] = bits_float(pack_word(init.value_type, init.value, 0.0f));
  } else {
    constexpr uint32_t kChunk = 64;  // even, a multiple of 4: no pair or Philox block is split
    float chunk[kChunk];
    for (uint32_t first = 0; first < drawn; first += kChunk) {
      const uint32_t last = std::min(first + kChunk, drawn);
      draw_elements(init, key_bits, first, last, chunk);
      for (uint32_t e = first; e < last; e += 2) {
        const float hi = e + 1 < last ? chunk[e + 1 - first] : 0.0f;  // past the width: 0
        row[e / 2] = bits_float(pack_word(init.value_type, chunk[e - first], hi));
      }
    }
  }
  std::fill(row + (drawn + 1) / 2, row + words, 0.0f);
}

}  // namespace row_init_detail

// Fills row[0, dim) (32-bit words) exactly as fill_initial_row(init, key_bits, row, dim) does,
// in init.value_type's packing; a constant row is one fill.
inline void write_initial_row(const InitializerOptions& init, uint64_t key_bits, float* row,
                              uint32_t dim) {
  if (init.value_type != ValueType::kFloat32) {  // 16-bit elements packed two a word
    row_init_detail::write_initial_row_16(init, key_bits, row, dim);
    return;
  }
  const uint32_t drawn = init.width != 0 ? std::min(init.width, dim) : dim;
  row_init_detail::draw_elements(init, key_bits, 0, drawn, row);
  std::fill(row + drawn, row + dim, 0.0f);
}

}  // namespace dynemb::table::cpu

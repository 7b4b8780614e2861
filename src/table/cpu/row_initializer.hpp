// New rows on the CPU: the same values as core/initializer.hpp's fill_initial_row, bit for bit,
// but drawing each Philox block once per row instead of once per element (4 elements share a
// uniform block, 2 a normal pair), which makes find_or_insert of new keys several times faster.
#pragma once

#include <algorithm>
#include <cstdint>

#include "dynemb/core/initializer.hpp"

namespace dynemb::table::cpu {

// Fills row[0, dim) exactly as fill_initial_row(init, key_bits, row, dim) does (16-bit value
// types: by fill_initial_row itself).
inline void write_initial_row(const InitializerOptions& init, uint64_t key_bits, float* row,
                              uint32_t dim) {
  using namespace init_detail;
  if (init.value_type != ValueType::kFloat32) {  // 16-bit elements packed two a word
    fill_initial_row(init, key_bits, row, dim);
    return;
  }
  const uint32_t drawn = init.width != 0 ? std::min(init.width, dim) : dim;
  switch (init.kind) {
    case InitializerKind::kUniform: {
      const float span = det::sub(init.high, init.low);
      for (uint32_t j = 0; j < drawn; j += 4) {
        const Philox4 r = draw(init, key_bits, j >> 2, kUniformStream);
        for (uint32_t t = 0; t < 4 && j + t < drawn; ++t)
          row[j + t] = det::fma(uniform01(r.w[t]), span, init.low);
      }
      break;
    }
    case InitializerKind::kNormal: {
      for (uint32_t j = 0; j < drawn; j += 2) {
        const Philox4 r = draw(init, key_bits, j >> 1, kNormalStream);
        const float radius = det::sqrt(det::mul(-2.0f, det::log(uniform01_open_low(r.w[0]))));
        float s, c;
        det::sincos_2pi(uniform01(r.w[1]), &s, &c);
        row[j] = det::fma(det::mul(radius, c), init.stddev, init.mean);
        if (j + 1 < drawn) row[j + 1] = det::fma(det::mul(radius, s), init.stddev, init.mean);
      }
      break;
    }
    case InitializerKind::kConstant:
      std::fill(row, row + drawn, init.value);
      break;
    default:
      for (uint32_t j = 0; j < drawn; ++j) row[j] = initial_value(init, key_bits, j);
  }
  std::fill(row + drawn, row + dim, 0.0f);
}

}  // namespace dynemb::table::cpu

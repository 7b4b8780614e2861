// Initializers: a new row's element j is a pure function of (seed, key, j) through Philox, so a
// row is the same on CPU and GPU, in any batch order and on any number of ranks.
#pragma once

#include <cstdint>
#include <string>

#include "dynemb/core/det_math.hpp"
#include "dynemb/core/host_device.hpp"
#include "dynemb/core/philox.hpp"
#include "dynemb/core/value_type.hpp"

namespace dynemb {

enum class InitializerKind : uint8_t {
  kUniform,          // U[low, high)
  kNormal,           // N(mean, stddev^2)
  kTruncatedNormal,  // N(mean, stddev^2) restricted to mean + [trunc_lower, trunc_upper] * stddev
  kConstant,         // value
  kDebug,            // float(key mod 2^24): a row shows its own key
};

// What a new row is filled with.
struct InitializerOptions {
  InitializerKind kind = InitializerKind::kUniform;
  float low = -0.05f;
  float high = 0.05f;
  float mean = 0.0f;
  float stddev = 1.0f;
  float trunc_lower = -2.0f;  // in units of stddev
  float trunc_upper = 2.0f;   // in units of stddev
  float value = 0.0f;
  uint64_t seed = 0;
  // Elements [0, width) are drawn as above; elements >= width start at 0 (a trainable row's
  // optimizer state). 0 = the whole row is drawn.
  uint32_t width = 0;
  // What the drawn elements are stored as. float32: element j is word j of the row. float16 /
  // bfloat16: word w holds elements 2w and 2w + 1 (value_words), each rounded to nearest even
  // from the float32 draw; a 16-bit row of `dim` words draws 2 * dim elements when width is 0.
  ValueType value_type = ValueType::kFloat32;

  // Equal kind and every setting.
  bool operator==(const InitializerOptions&) const = default;
};

// Throws InvalidArgument naming `where` and the bad field (low >= high, stddev < 0, ...).
void validate_initializer(const InitializerOptions& init, const char* where);

// The initializer's name ("uniform", "normal", ...).
std::string to_string(InitializerKind kind);

namespace init_detail {
inline constexpr uint32_t kUniformStream = 0x10000u;
inline constexpr uint32_t kNormalStream = 0x20000u;
inline constexpr uint32_t kTruncatedStream = 0x30000u;
inline constexpr int kTruncatedAttempts = 32;

DYNEMB_HD Philox4 draw(const InitializerOptions& init, uint64_t key_bits, uint32_t block,
                       uint32_t stream) {
  const Philox4 counter{
      {static_cast<uint32_t>(key_bits), static_cast<uint32_t>(key_bits >> 32), block, stream}};
  return philox4x32_10(counter, static_cast<uint32_t>(init.seed),
                       static_cast<uint32_t>(init.seed >> 32));
}

// A standard normal from two words (Box-Muller); `use_sin` picks the second of the pair.
DYNEMB_HD float box_muller(uint32_t w0, uint32_t w1, bool use_sin) {
  const float r = det::sqrt(det::mul(-2.0f, det::log(uniform01_open_low(w0))));
  float s, c;
  det::sincos_2pi(uniform01(w1), &s, &c);
  return det::mul(r, use_sin ? s : c);
}
}  // namespace init_detail

// Element j of the initial row of `key_bits` (the key's uint64 bit pattern).
DYNEMB_HD float initial_value(const InitializerOptions& init, uint64_t key_bits, uint32_t j) {
  using namespace init_detail;
  if (init.width != 0 && j >= init.width) return 0.0f;
  switch (init.kind) {
    case InitializerKind::kUniform: {
      const Philox4 r = draw(init, key_bits, j >> 2, kUniformStream);
      return det::fma(uniform01(r.w[j & 3]), det::sub(init.high, init.low), init.low);
    }
    case InitializerKind::kNormal: {
      const Philox4 r = draw(init, key_bits, j >> 1, kNormalStream);
      return det::fma(box_muller(r.w[0], r.w[1], (j & 1) != 0), init.stddev, init.mean);
    }
    case InitializerKind::kTruncatedNormal: {
      float z = 0.0f;
      for (int attempt = 0; attempt < kTruncatedAttempts; ++attempt) {
        const Philox4 r =
            draw(init, key_bits, j, kTruncatedStream + static_cast<uint32_t>(attempt));
        z = box_muller(r.w[0], r.w[1], false);
        if (z >= init.trunc_lower && z <= init.trunc_upper) break;
      }
      z = z < init.trunc_lower ? init.trunc_lower : (z > init.trunc_upper ? init.trunc_upper : z);
      return det::fma(z, init.stddev, init.mean);
    }
    case InitializerKind::kConstant:
      return init.value;
    case InitializerKind::kDebug:
    default:
      return static_cast<float>(key_bits & 0xFFFFFFull);
  }
}

// Word w of the initial row of `key_bits` in init.value_type's packing (float32: the bits of
// initial_value(init, key_bits, w)).
DYNEMB_HD uint32_t initial_word(const InitializerOptions& init, uint64_t key_bits, uint32_t w) {
  if (init.value_type == ValueType::kFloat32)
    return value_detail::float_bits(initial_value(init, key_bits, w));
  if (init.width != 0 && 2 * w >= init.width) return 0;
  return pack_word(init.value_type, initial_value(init, key_bits, 2 * w),
                   initial_value(init, key_bits, 2 * w + 1));
}

// Fills `row[0, dim)` (32-bit words) with the initial row of `key_bits` in init.value_type's
// packing.
DYNEMB_HD void fill_initial_row(const InitializerOptions& init, uint64_t key_bits, float* row,
                                uint32_t dim) {
  if (init.value_type == ValueType::kFloat32) {
    for (uint32_t j = 0; j < dim; ++j) row[j] = initial_value(init, key_bits, j);
    return;
  }
  for (uint32_t w = 0; w < dim; ++w)
    row[w] = value_detail::bits_float(initial_word(init, key_bits, w));
}

}  // namespace dynemb

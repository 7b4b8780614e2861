// The float16 / bfloat16 conversions against references computed in float64: every 16-bit
// pattern converts exactly, float32 -> 16 bits rounds to the nearest value (ties to even),
// stochastic rounding picks a neighbour with the right odds; initializers pack their draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/core/value_type.hpp"

namespace dynemb {
namespace {

// The float64 value of float16 bits, from the format's definition.
double half_reference(uint16_t h) {
  const int sign = (h & 0x8000) != 0 ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant == 0 ? sign * std::numeric_limits<double>::infinity() : NAN;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

double bf16_reference(uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
}

// Nearest of the sorted non-negative finite values `grid` (bits index = position) to |x|, ties
// to the even bits; past the top, `overflow` (the next power) decides Inf.
uint16_t nearest(const std::vector<double>& grid, double overflow, float x) {
  const double a = std::abs(static_cast<double>(x));
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const auto it = std::lower_bound(grid.begin(), grid.end(), a);
  uint16_t hi, lo;
  double hi_v;
  if (it == grid.end()) {
    hi = static_cast<uint16_t>(grid.size());  // Inf's bits
    hi_v = overflow;
  } else {
    hi = static_cast<uint16_t>(it - grid.begin());
    hi_v = *it;
  }
  if (hi_v == a || hi == 0) return sign | hi;
  lo = hi - 1;
  const double d_lo = a - grid[lo], d_hi = hi_v - a;
  if (d_lo < d_hi) return sign | lo;
  if (d_hi < d_lo) return sign | hi;
  return sign | ((lo & 1) == 0 ? lo : hi);
}

std::vector<double> grid_of(double (*value)(uint16_t), uint16_t inf_bits) {
  std::vector<double> g;
  for (uint32_t b = 0; b < inf_bits; ++b) g.push_back(value(static_cast<uint16_t>(b)));
  return g;
}

// A random float32 spread over every exponent (and the 16-bit types' edges).
float random_float(testing::TestRng& rng) {
  switch (rng.uniform(0, 3)) {
    case 0:  // any bits but NaN
      for (;;) {
        const float f = std::bit_cast<float>(static_cast<uint32_t>(rng.next()));
        if (!std::isnan(f)) return f;
      }
    case 1:  // halfway points and their neighbours of float16
    {
      const uint16_t h = static_cast<uint16_t>(rng.uniform(0, 0x7BFF));
      const double mid = (half_reference(h) + half_reference(h + 1)) / 2;
      const float f = static_cast<float>(mid);
      const int nudge = static_cast<int>(rng.uniform(0, 2)) - 1;
      return std::bit_cast<float>(std::bit_cast<uint32_t>(f) + nudge) * (rng.chance(0.5) ? 1 : -1);
    }
    case 2:  // halfway points of bfloat16
    {
      const uint32_t b = static_cast<uint32_t>(rng.uniform(0, 0x7F7F)) << 16;
      const int nudge = static_cast<int>(rng.uniform(0, 2)) - 1;
      return std::bit_cast<float>(b + 0x8000u + nudge);
    }
    default:  // the float16 range, subnormals included
      return static_cast<float>(
          std::ldexp(static_cast<double>(rng.next() >> 11) / 9007199254740992.0,
                     static_cast<int>(rng.uniform(0, 45)) - 28));
  }
}

TEST(ValueType, EveryHalfPatternConvertsExactlyAndBack) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = half_to_float(h);
    const double want = half_reference(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      EXPECT_EQ(float_to_half(f), 0x7FFF) << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
    ASSERT_EQ(float_to_half(f), h) << std::hex << b;
  }
}

TEST(ValueType, EveryBfloat16PatternConvertsExactlyAndBack) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = bf16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), 0x7FFF) << std::hex << b;
      continue;
    }
    ASSERT_EQ(float_to_bf16(f), h) << std::hex << b;
  }
}

TEST(ValueType, RoundsToNearestEvenAsFloat64Says) {
  testing::TestRng rng;
  const std::vector<double> half_grid = grid_of(half_reference, 0x7C00);
  const std::vector<double> bf16_grid = grid_of(bf16_reference, 0x7F80);
  // The edges: float16's largest finite and its halfway to Inf, subnormal halfway points,
  // bfloat16's largest finite, and both zeros.
  std::vector<float> edges = {65504.0f,
                              65519.996f,
                              65520.0f,
                              65520.004f,
                              65536.0f,
                              0.0f,
                              -0.0f,
                              std::ldexp(1.0f, -25),
                              std::ldexp(1.5f, -25),
                              std::ldexp(1.0f, -24),
                              std::ldexp(3.0f, -25),
                              3.3895314e38f,
                              3.4028235e38f};
  for (float e : std::vector<float>(edges)) {
    edges.push_back(-e);
    edges.push_back(std::nextafter(e, 0.0f));
    edges.push_back(std::nextafter(e, INFINITY));
  }
  for (size_t i = 0; i < 400000 + edges.size(); ++i) {
    const float x = i < edges.size() ? edges[i] : random_float(rng);
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_half(x), nearest(half_grid, 65536.0, x))
        << x << " bits " << std::hex << std::bit_cast<uint32_t>(x);
    ASSERT_EQ(float_to_bf16(x), nearest(bf16_grid, std::ldexp(1.0, 128), x))
        << x << " bits " << std::hex << std::bit_cast<uint32_t>(x);
  }
}

// Stochastic rounding lands on one of the two neighbours, with the odds of its distance: the
// mean of many draws is the value itself.
TEST(ValueType, StochasticRoundingIsUnbiased) {
  testing::TestRng rng;
  for (int trial = 0; trial < 40; ++trial) {
    const float x = static_cast<float>((rng.next() % 2000000) / 1e6 - 1.0) *
                    (trial % 2 == 0 ? 1.0f : 1e-5f);  // also float16's subnormal range
    if (x == 0.0f) continue;
    for (int type = 0; type < 2; ++type) {
      const auto down = [&](float v) {
        return type == 0 ? half_to_float(value_detail::float_to_half_host(v, true, 0))
                         : bf16_to_float(value_detail::float_to_bf16_host(v, true, 0));
      };
      const float lo = down(x);  // random 0: truncation toward zero
      double sum = 0;
      const int draws = 20000;
      for (int d = 0; d < draws; ++d) {
        const uint32_t r = static_cast<uint32_t>(rng.next());
        const float y = type == 0 ? half_to_float(value_detail::float_to_half_host(x, true, r))
                                  : bf16_to_float(value_detail::float_to_bf16_host(x, true, r));
        ASSERT_TRUE(y == lo || std::abs(y) > std::abs(lo)) << x;
        sum += y;
      }
      const double ulp = type == 0
                             ? std::max(std::ldexp(1.0, -24), std::ldexp(1.0, std::ilogb(x) - 10))
                             : std::ldexp(1.0, std::ilogb(x) - 7);
      // The mean of `draws` Bernoulli picks: within 5 standard deviations (ulp / 2 / sqrt(n)).
      EXPECT_NEAR(sum / draws, x, 5 * ulp / 2 / std::sqrt(draws)) << "type " << type;
    }
  }
}

TEST(ValueType, ParseNamesTheArgumentTheValueAndTheAllowedNames) {
  EXPECT_EQ(parse_value_type("bf16", "w", "a"), ValueType::kBFloat16);
  EXPECT_EQ(parse_value_type("float16", "w", "a"), ValueType::kFloat16);
  EXPECT_EQ(parse_value_type("fp32", "w", "a"), ValueType::kFloat32);
  try {
    parse_value_type("half8", "dynemb train", "--value-type");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--value-type"), std::string::npos) << m;
    EXPECT_NE(m.find("half8"), std::string::npos) << m;
    EXPECT_NE(m.find("bfloat16"), std::string::npos) << m;
    EXPECT_NE(m.find("float16"), std::string::npos) << m;
  }
}

// A 16-bit initializer packs the float32 draws rounded to nearest even, two a word, the last
// word's high half zero for an odd width and the words after it zero.
TEST(ValueType, InitializerPacksItsFloat32Draws) {
  testing::TestRng rng;
  for (ValueType type : {ValueType::kFloat16, ValueType::kBFloat16}) {
    for (InitializerKind kind : {InitializerKind::kUniform, InitializerKind::kNormal,
                                 InitializerKind::kTruncatedNormal, InitializerKind::kDebug}) {
      InitializerOptions init;
      init.kind = kind;
      init.seed = rng.next();
      init.width = 1 + static_cast<uint32_t>(rng.uniform(0, 40));
      InitializerOptions f32 = init;
      init.value_type = type;
      const uint32_t words = value_words(type, init.width) + 3;
      std::vector<float> row(words, -1.0f);
      const uint64_t key = rng.next();
      fill_initial_row(init, key, row.data(), words);
      const auto* halves = reinterpret_cast<const uint16_t*>(row.data());
      for (uint32_t j = 0; j < 2 * words; ++j) {
        const float want = initial_value(f32, key, j);
        const uint16_t bits =
            type == ValueType::kFloat16 ? float_to_half(want) : float_to_bf16(want);
        ASSERT_EQ(halves[j], j < init.width ? bits : 0) << "element " << j;
      }
    }
  }
}

}  // namespace
}  // namespace dynemb

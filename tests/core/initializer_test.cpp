// Initializers: each kind's sample moments and range, and purity (a function of seed, key, j).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/initializer.hpp"

namespace dynemb {
namespace {

using testing::TestRng;

// Draws `keys` random keys x `dim` elements.
std::vector<double> sample(TestRng& rng, const InitializerOptions& init, int keys = 20000,
                           uint32_t dim = 8) {
  std::vector<double> v;
  v.reserve(static_cast<size_t>(keys) * dim);
  for (int i = 0; i < keys; ++i) {
    const uint64_t key = rng.next();
    for (uint32_t j = 0; j < dim; ++j) v.push_back(initial_value(init, key, j));
  }
  return v;
}

struct Moments {
  double mean = 0, stddev = 0, min = INFINITY, max = -INFINITY;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size() - 1));
  return m;
}

// Standard normal density and distribution function.
double phi(double z) {
  return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
}
double Phi(double z) {
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

TEST(InitializerTest, UniformCoversLowToHighWithTheRightMoments) {
  TestRng rng;
  InitializerOptions init;
  init.kind = InitializerKind::kUniform;
  init.low = -0.75f;
  init.high = 1.25f;
  init.seed = rng.next();
  const auto v = sample(rng, init);
  const Moments m = moments(v);
  const double n = static_cast<double>(v.size()), width = 2.0, sd = width / std::sqrt(12.0);
  EXPECT_GE(m.min, -0.75);
  EXPECT_LT(m.max, 1.25);
  EXPECT_NEAR(m.mean, 0.25, 6 * sd / std::sqrt(n));
  EXPECT_NEAR(m.stddev, sd, 0.01 * sd);
  EXPECT_LT(m.min, -0.74);
  EXPECT_GT(m.max, 1.24);
}

TEST(InitializerTest, NormalHasTheRightMomentsAndTails) {
  TestRng rng;
  InitializerOptions init;
  init.kind = InitializerKind::kNormal;
  init.mean = 0.5f;
  init.stddev = 2.0f;
  init.seed = rng.next();
  const auto v = sample(rng, init);
  const Moments m = moments(v);
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(m.mean, 0.5, 6 * 2.0 / std::sqrt(n));
  EXPECT_NEAR(m.stddev, 2.0, 0.02);
  size_t within1 = 0, beyond2 = 0;
  for (double x : v) {
    const double z = (x - 0.5) / 2.0;
    within1 += std::fabs(z) <= 1.0;
    beyond2 += std::fabs(z) > 2.0;
  }
  const double p1 = Phi(1) - Phi(-1), p2 = 2 * Phi(-2);
  EXPECT_NEAR(within1 / n, p1, 6 * std::sqrt(p1 * (1 - p1) / n));
  EXPECT_NEAR(beyond2 / n, p2, 6 * std::sqrt(p2 * (1 - p2) / n));
}

TEST(InitializerTest, TruncatedNormalStaysInItsBoundsWithTheRightMoments) {
  TestRng rng;
  InitializerOptions init;
  init.kind = InitializerKind::kTruncatedNormal;
  init.mean = -1.0f;
  init.stddev = 0.5f;
  init.trunc_lower = -1.0f;
  init.trunc_upper = 2.0f;
  init.seed = rng.next();
  const auto v = sample(rng, init);
  const Moments m = moments(v);
  const double a = -1.0, b = 2.0, Z = Phi(b) - Phi(a);
  const double zmean = (phi(a) - phi(b)) / Z;
  const double zvar = 1 + (a * phi(a) - b * phi(b)) / Z - zmean * zmean;
  EXPECT_GE(m.min, -1.0 + 0.5 * a - 1e-6);
  EXPECT_LE(m.max, -1.0 + 0.5 * b + 1e-6);
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(m.mean, -1.0 + 0.5 * zmean, 6 * 0.5 * std::sqrt(zvar / n));
  EXPECT_NEAR(m.stddev, 0.5 * std::sqrt(zvar), 0.01);
}

TEST(InitializerTest, ConstantAndDebugRowsAreExact) {
  TestRng rng;
  InitializerOptions constant;
  constant.kind = InitializerKind::kConstant;
  constant.value = -3.25f;
  InitializerOptions debug;
  debug.kind = InitializerKind::kDebug;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t key = rng.next();
    const uint32_t j = static_cast<uint32_t>(rng.uniform(0, 1000));
    EXPECT_EQ(initial_value(constant, key, j), -3.25f);
    EXPECT_EQ(initial_value(debug, key, j), static_cast<float>(key % (1u << 24)));
  }
}

TEST(InitializerTest, RowsArePureFunctionsOfSeedKeyAndElement) {
  TestRng rng;
  for (InitializerKind kind :
       {InitializerKind::kUniform, InitializerKind::kNormal, InitializerKind::kTruncatedNormal}) {
    SCOPED_TRACE(to_string(kind));
    InitializerOptions init;
    init.kind = kind;
    init.seed = rng.next();
    InitializerOptions other = init;
    other.seed = init.seed ^ (1ull << rng.uniform(0, 63));
    size_t same_across_seeds = 0, same_across_keys = 0, total = 0;
    for (int i = 0; i < 2000; ++i) {
      const uint64_t key = rng.next();
      float row[16], again[16], reversed[16];
      fill_initial_row(init, key, row, 16);
      fill_initial_row(init, key, again, 16);
      for (int j = 15; j >= 0; --j)
        reversed[j] = initial_value(init, key, static_cast<uint32_t>(j));
      for (int j = 0; j < 16; ++j) {
        ASSERT_EQ(row[j], again[j]);
        ASSERT_EQ(row[j], reversed[j]);
        same_across_seeds += row[j] == initial_value(other, key, static_cast<uint32_t>(j));
        same_across_keys += row[j] == initial_value(init, key ^ 1, static_cast<uint32_t>(j));
        ++total;
      }
    }
    // Equal floats by chance: rare (truncated draws clamp at the bounds only after 32 tries).
    EXPECT_LT(same_across_seeds, total / 100);
    EXPECT_LT(same_across_keys, total / 100);
  }
}

TEST(InitializerTest, InvalidArgumentsAreRejected) {
  InitializerOptions uniform;
  uniform.low = 1.0f;
  uniform.high = 1.0f;
  EXPECT_THROW(validate_initializer(uniform, "test"), InvalidArgument);
  InitializerOptions normal;
  normal.kind = InitializerKind::kNormal;
  normal.stddev = -0.5f;
  EXPECT_THROW(validate_initializer(normal, "test"), InvalidArgument);
  InitializerOptions truncated;
  truncated.kind = InitializerKind::kTruncatedNormal;
  truncated.trunc_lower = 1.0f;
  truncated.trunc_upper = 0.5f;
  EXPECT_THROW(validate_initializer(truncated, "test"), InvalidArgument);
  InitializerOptions constant;
  constant.kind = InitializerKind::kConstant;
  constant.value = NAN;
  EXPECT_THROW(validate_initializer(constant, "test"), InvalidArgument);
  EXPECT_NO_THROW(validate_initializer(InitializerOptions{}, "test"));
}

}  // namespace
}  // namespace dynemb

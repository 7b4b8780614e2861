// det::log and det::sincos_2pi against float64 std::log / std::sin / std::cos.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/test_random.hpp"
#include "dynemb/core/det_math.hpp"

namespace dynemb {
namespace {

using testing::TestRng;

// |got - ref| in units of the float ulp at ref.
double ulp_error(float got, double ref) {
  const float r = static_cast<float>(ref);
  const double ulp = static_cast<double>(std::nextafter(std::fabs(r), INFINITY)) - std::fabs(r);
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}

TEST(DetMathTest, LogIsWithinTwoUlpOfFloat64) {
  TestRng rng;
  double worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const double ref = std::log(static_cast<double>(x));
    const float got = det::log(x);
    const double err = ref == 0.0 ? std::fabs(got) / 0x1.0p-149 : ulp_error(got, ref);
    if (err > worst) worst = err, worst_x = x;
  };
  for (int i = 0; i < 1000000; ++i) {
    // Any positive normal float.
    const uint32_t exponent = static_cast<uint32_t>(rng.uniform(1, 254));
    check(det::bits_float((exponent << 23) | static_cast<uint32_t>(rng.uniform(0, 0x7FFFFF))));
    // Inputs near 1, where log is near 0.
    check(1.0f +
          static_cast<float>(static_cast<int>(rng.uniform(0, 1 << 20)) - (1 << 19)) * 0x1.0p-23f);
  }
  // Every input the initializers use: (0, 1] in steps of 2^-24.
  for (uint32_t k = 1; k <= (1u << 24); ++k) check(static_cast<float>(k) * 0x1.0p-24f);
  std::cout << "det::log worst error " << worst << " ulp at x = " << worst_x << std::endl;
  EXPECT_LE(worst, 2.0) << "x = " << worst_x;
  EXPECT_EQ(det::log(1.0f), 0.0f);
}

TEST(DetMathTest, SinCos2PiIsWithinTwoUlpOfFloat64ForEveryInput) {
  double worst = 0;
  uint32_t worst_k = 0;
  auto check = [&](uint32_t k) {
    const float u = static_cast<float>(k) * 0x1.0p-24f;
    float s = 0, c = 0;
    det::sincos_2pi(u, &s, &c);
    const double angle = 2.0 * M_PI * (static_cast<double>(k) * 0x1.0p-24);
    for (auto [got, ref] : {std::pair<float, double>{s, std::sin(angle)}, {c, std::cos(angle)}}) {
      // Exact zeros of sin/cos (quarter turns) come out of float64 as ~1e-16.
      const double err =
          std::fabs(ref) < 1e-12 ? (std::fabs(got) < 1e-12 ? 0.0 : 1e9) : ulp_error(got, ref);
      if (err > worst) worst = err, worst_k = k;
    }
  };
  for (uint32_t k = 0; k < (1u << 24); ++k) check(k);  // every input the initializers use
  std::cout << "det::sincos_2pi worst error " << worst << " ulp at u = " << worst_k << " * 2^-24"
            << std::endl;
  EXPECT_LE(worst, 2.0) << "u = " << worst_k << " * 2^-24";
}

}  // namespace
}  // namespace dynemb

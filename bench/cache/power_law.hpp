// Exact Zipf draws in O(1) each, without a table: P(k) proportional to k^-alpha over k in [1, n]
// (rejection-inversion, Hörmann and Derflinger, "Rejection-inversion to generate variates from
// monotone discrete distributions", 1996). bench/train/zipf.hpp's table of n doubles is too big
// and too slow for 50M ids.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace dynemb::bench {

class PowerLawSampler {
 public:
  // Ids 1..n with exponent alpha > 0 (alpha != 1 handled exactly; alpha = 1 through the limit).
  PowerLawSampler(uint64_t n, double alpha)
      : n_(static_cast<double>(n)),
        alpha_(alpha),
        h_integral_x1_(h_integral(1.5) - 1.0),
        h_integral_n_(h_integral(n_ + 0.5)),
        s_(2.0 - h_integral_inverse(h_integral(2.5) - h(2.0))) {}

  // One id in [1, n].
  template <class Rng>
  uint64_t operator()(Rng& rng) const {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (;;) {
      const double u = h_integral_n_ + uniform(rng) * (h_integral_x1_ - h_integral_n_);
      const double x = h_integral_inverse(u);
      double k = std::floor(x + 0.5);
      if (k < 1.0) k = 1.0;
      if (k > n_) k = n_;
      if (k - x <= s_ || u >= h_integral(k + 0.5) - h(k)) return static_cast<uint64_t>(k);
    }
  }

  // The probability mass of ids 1..c (the hit rate of an ideal cache of c rows).
  double head_mass(uint64_t c) const {
    double head = 0.0;
    double total = 0.0;
    for (uint64_t k = 1; k <= static_cast<uint64_t>(n_); ++k) {
      const double p = h(static_cast<double>(k));
      total += p;
      if (k <= c) head += p;
    }
    return head / total;
  }

 private:
  double h(double x) const { return std::exp(-alpha_ * std::log(x)); }
  // The integral of h from 1 to x.
  double h_integral(double x) const {
    const double log_x = std::log(x);
    return helper2((1.0 - alpha_) * log_x) * log_x;
  }
  double h_integral_inverse(double x) const {
    double t = x * (1.0 - alpha_);
    if (t < -1.0) t = -1.0;  // rounding at the lower end
    return std::exp(helper1(t) * x);
  }
  // log(1 + x) / x, and (exp(x) - 1) / x, accurate near 0.
  static double helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x / 2.0; }
  static double helper2(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x / 2.0; }

  double n_;
  double alpha_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

}  // namespace dynemb::bench

// Zipf-distributed ids: P(k) proportional to 1 / (k + 1)^alpha over k in [0, n).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace dynemb::bench {

class ZipfSampler {
 public:
  // The cumulative distribution over `n` ids with exponent `alpha`.
  ZipfSampler(uint64_t n, double alpha) : cdf_(n) {
    double sum = 0.0;
    for (uint64_t k = 0; k < n; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), alpha);
      cdf_[k] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }

  // One id in [0, n).
  template <class Rng>
  uint64_t operator()(Rng& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    return static_cast<uint64_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

}  // namespace dynemb::bench

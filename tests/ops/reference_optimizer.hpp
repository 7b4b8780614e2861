// A float64 implementation of each optimizer's published update rule, for tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "dynemb/ops/optimizer.hpp"

namespace dynemb::test {

// Float64 reference state of one row.
struct RefRow {
  std::vector<double> w, a, b;  // a/b: m,v (Adam), G (AdaGrad), v (RMSProp), z,n (FTRL)
  double row_acc = 0.0;         // row-wise AdaGrad
  int t = 0;
};

inline void ref_update(const OptimizerOptions& o, RefRow& r, const std::vector<double>& grad) {
  const size_t d = r.w.size();
  double scale = 1.0;
  if (o.clip_norm > 0) {
    double sq = 0;
    for (double g : grad) sq += g * g;
    const double norm = std::sqrt(sq);
    if (norm > o.clip_norm) scale = o.clip_norm / norm;
  }
  auto eff = [&](size_t j) {
    double g = grad[j] * scale + double(o.weight_decay) * r.w[j];
    if (o.clip_value > 0) g = std::clamp(g, -double(o.clip_value), double(o.clip_value));
    return g;
  };
  const double lr = o.learning_rate, eps = o.eps;
  switch (o.kind) {
    case OptimizerKind::kSgd:
      for (size_t j = 0; j < d; ++j) r.w[j] -= lr * eff(j);
      break;
    case OptimizerKind::kAdam: {
      r.t += 1;
      const double b1 = o.beta1, b2 = o.beta2;
      for (size_t j = 0; j < d; ++j) {
        const double g = eff(j);
        r.a[j] = b1 * r.a[j] + (1 - b1) * g;
        r.b[j] = b2 * r.b[j] + (1 - b2) * g * g;
        const double mh = r.a[j] / (1 - std::pow(b1, r.t));
        const double vh = r.b[j] / (1 - std::pow(b2, r.t));
        r.w[j] -= lr * mh / (std::sqrt(vh) + eps);
      }
      break;
    }
    case OptimizerKind::kAdaGrad:
      for (size_t j = 0; j < d; ++j) {
        const double g = eff(j);
        r.a[j] += g * g;
        r.w[j] -= lr * g / (std::sqrt(r.a[j]) + eps);
      }
      break;
    case OptimizerKind::kRowWiseAdaGrad: {
      std::vector<double> g(d);
      double sq = 0;
      for (size_t j = 0; j < d; ++j) {
        g[j] = eff(j);
        sq += g[j] * g[j];
      }
      r.row_acc += sq / d;
      for (size_t j = 0; j < d; ++j) r.w[j] -= lr * g[j] / (std::sqrt(r.row_acc) + eps);
      break;
    }
    case OptimizerKind::kRmsProp:
      for (size_t j = 0; j < d; ++j) {
        const double g = eff(j);
        r.a[j] = o.rho * r.a[j] + (1 - double(o.rho)) * g * g;
        r.w[j] -= lr * g / (std::sqrt(r.a[j]) + eps);
      }
      break;
    case OptimizerKind::kFtrl:
      for (size_t j = 0; j < d; ++j) {
        const double g = eff(j);
        const double n_new = r.b[j] + g * g;
        const double sigma = (std::sqrt(n_new) - std::sqrt(r.b[j])) / lr;
        r.a[j] += g - sigma * r.w[j];
        r.b[j] = n_new;
        const double z = r.a[j];
        r.w[j] = std::abs(z) <= o.ftrl_l1 ? 0.0
                                          : -(z - std::copysign(double(o.ftrl_l1), z)) /
                                                ((o.ftrl_beta + std::sqrt(n_new)) / lr + o.ftrl_l2);
      }
      break;
  }
}

}  // namespace dynemb::test

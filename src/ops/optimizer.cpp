#include "dynemb/ops/optimizer.hpp"

#include <cmath>

#include "dynemb/core/error.hpp"

namespace dynemb {
namespace {

void require_finite(float v, float low, bool low_inclusive, float high, bool high_inclusive,
                    const char* where, const char* argument, const char* limit) {
  const bool ok = std::isfinite(v) && (low_inclusive ? v >= low : v > low) &&
                  (high_inclusive ? v <= high : v < high);
  require(ok, where, argument, std::to_string(v), limit);
}

}  // namespace

void validate_optimizer(const OptimizerOptions& o, const char* where) {
  require(static_cast<uint8_t>(o.kind) <= static_cast<uint8_t>(OptimizerKind::kFtrl), where,
          "optimizer.kind", std::to_string(static_cast<int>(o.kind)),
          "must be sgd, adam, adagrad, rowwise_adagrad, rmsprop or ftrl");
  constexpr float kInf = INFINITY;
  require_finite(o.learning_rate, 0.0f, false, kInf, false, where, "optimizer.learning_rate",
                 "must be finite and > 0");
  require_finite(o.beta1, 0.0f, true, 1.0f, false, where, "optimizer.beta1", "must be in [0, 1)");
  require_finite(o.beta2, 0.0f, true, 1.0f, false, where, "optimizer.beta2", "must be in [0, 1)");
  require_finite(o.rho, 0.0f, true, 1.0f, false, where, "optimizer.rho", "must be in [0, 1)");
  require_finite(o.eps, 0.0f, true, kInf, false, where, "optimizer.eps", "must be finite and >= 0");
  require_finite(o.initial_accumulator, 0.0f, true, kInf, false, where,
                 "optimizer.initial_accumulator", "must be finite and >= 0");
  require_finite(o.ftrl_l1, 0.0f, true, kInf, false, where, "optimizer.ftrl_l1",
                 "must be finite and >= 0");
  require_finite(o.ftrl_l2, 0.0f, true, kInf, false, where, "optimizer.ftrl_l2",
                 "must be finite and >= 0");
  require_finite(o.ftrl_beta, 0.0f, true, kInf, false, where, "optimizer.ftrl_beta",
                 "must be finite and >= 0");
  require_finite(o.weight_decay, 0.0f, true, kInf, false, where, "optimizer.weight_decay",
                 "must be finite and >= 0");
  require_finite(o.clip_norm, 0.0f, true, kInf, false, where, "optimizer.clip_norm",
                 "must be finite and >= 0 (0 = off)");
  require_finite(o.clip_value, 0.0f, true, kInf, false, where, "optimizer.clip_value",
                 "must be finite and >= 0 (0 = off)");
  require(!o.state_in_value_type || o.value_type == ValueType::kBFloat16, where,
          "optimizer.state_in_value_type", "true",
          "needs value_type bfloat16 (is " + to_string(o.value_type) +
              "; float16's range flushes small second moments to 0)");
  if (o.kind == OptimizerKind::kAdaGrad || o.kind == OptimizerKind::kRowWiseAdaGrad ||
      o.kind == OptimizerKind::kRmsProp) {
    require(o.eps > 0.0f || o.initial_accumulator > 0.0f, where, "optimizer.eps",
            std::to_string(o.eps), "must be > 0 when initial_accumulator is 0 (division by 0)");
  }
}

std::string to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdaGrad:
      return "adagrad";
    case OptimizerKind::kRowWiseAdaGrad:
      return "rowwise_adagrad";
    case OptimizerKind::kRmsProp:
      return "rmsprop";
    case OptimizerKind::kFtrl:
      return "ftrl";
  }
  return "unknown";
}

OptimizerKind parse_optimizer(const std::string& name) {
  for (auto k : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdaGrad,
                 OptimizerKind::kRowWiseAdaGrad, OptimizerKind::kRmsProp, OptimizerKind::kFtrl}) {
    if (to_string(k) == name) return k;
  }
  throw InvalidArgument("parse_optimizer: optimizer = \"" + name +
                        "\", must be sgd, adam, adagrad, rowwise_adagrad, rmsprop or ftrl");
}

}  // namespace dynemb

#include "dynemb/core/options.hpp"

#include <bit>
#include <cmath>
#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb {
namespace {

std::string str(double v) {
  std::string s = std::to_string(v);
  return s;
}

}  // namespace

void validate_initializer(const InitializerOptions& init, const char* where) {
  switch (init.kind) {
    case InitializerKind::kUniform:
      require(std::isfinite(init.low) && std::isfinite(init.high) && init.low < init.high, where,
              "initializer.low/high", str(init.low) + "/" + str(init.high),
              "must be finite with low < high");
      break;
    case InitializerKind::kNormal:
    case InitializerKind::kTruncatedNormal:
      require(std::isfinite(init.mean), where, "initializer.mean", str(init.mean),
              "must be finite");
      require(std::isfinite(init.stddev) && init.stddev >= 0.0f, where, "initializer.stddev",
              str(init.stddev), "must be finite and >= 0");
      if (init.kind == InitializerKind::kTruncatedNormal) {
        require(init.trunc_lower < init.trunc_upper && init.trunc_upper > 0.0f &&
                    init.trunc_lower < 0.0f,
                where, "initializer.trunc_lower/trunc_upper",
                str(init.trunc_lower) + "/" + str(init.trunc_upper),
                "must satisfy trunc_lower < 0 < trunc_upper (units of stddev)");
      }
      break;
    case InitializerKind::kConstant:
      require(std::isfinite(init.value), where, "initializer.value", str(init.value),
              "must be finite");
      break;
    case InitializerKind::kDebug:
      break;
    default:
      require(false, where, "initializer.kind", std::to_string(static_cast<int>(init.kind)),
              "must be uniform, normal, truncated_normal, constant or debug");
  }
  require(static_cast<int>(init.value_type) <= static_cast<int>(ValueType::kBFloat16), where,
          "initializer.value_type", std::to_string(static_cast<int>(init.value_type)),
          "must be float32, float16 or bfloat16");
}

void validate_table_options(const TableOptions& o) {
  constexpr const char* w = "TableOptions";
  require(o.dim > 0, w, "dim", std::to_string(o.dim), "must be > 0");
  require(o.dim <= (1u << 20), w, "dim", std::to_string(o.dim), "must be <= 1048576");
  require(std::has_single_bit(o.bucket_capacity) && o.bucket_capacity >= 16 &&
              o.bucket_capacity <= 1024,
          w, "bucket_capacity", std::to_string(o.bucket_capacity),
          "must be a power of two in [16, 1024]");
  require(
      o.init_capacity > 0 && o.init_capacity % o.bucket_capacity == 0, w, "init_capacity",
      std::to_string(o.init_capacity),
      "must be a positive multiple of bucket_capacity (" + std::to_string(o.bucket_capacity) + ")");
  require(o.max_capacity % o.bucket_capacity == 0, w, "max_capacity",
          std::to_string(o.max_capacity),
          "must be a multiple of bucket_capacity (" + std::to_string(o.bucket_capacity) + ")");
  require(o.max_capacity >= o.init_capacity, w, "max_capacity", std::to_string(o.max_capacity),
          "must be >= init_capacity (" + std::to_string(o.init_capacity) + ")");
  require(o.max_capacity <= (1ull << 40), w, "max_capacity", std::to_string(o.max_capacity),
          "must be <= 2^40");
  require(o.max_load_factor > 0.0 && o.max_load_factor <= 1.0, w, "max_load_factor",
          str(o.max_load_factor), "must be in (0, 1]");
  require(static_cast<int>(o.score_policy) <= static_cast<int>(ScorePolicy::kCustomized), w,
          "score_policy", std::to_string(static_cast<int>(o.score_policy)),
          "must be timestamp, step, lfu or customized");
  require(static_cast<int>(o.safe_check) <= static_cast<int>(SafeCheck::kIgnore), w, "safe_check",
          std::to_string(static_cast<int>(o.safe_check)), "must be error, warning or ignore");
  require(o.num_threads <= 1024, w, "num_threads", std::to_string(o.num_threads),
          "must be <= 1024 (0 = all hardware threads)");
  require(o.device >= 0, w, "device", std::to_string(o.device), "must be >= 0");
  validate_initializer(o.initializer, "TableOptions.initializer");
}

std::string to_string(InitializerKind kind) {
  switch (kind) {
    case InitializerKind::kUniform:
      return "uniform";
    case InitializerKind::kNormal:
      return "normal";
    case InitializerKind::kTruncatedNormal:
      return "truncated_normal";
    case InitializerKind::kConstant:
      return "constant";
    case InitializerKind::kDebug:
      return "debug";
  }
  return "unknown";
}

std::string to_string(ScorePolicy policy) {
  switch (policy) {
    case ScorePolicy::kTimestamp:
      return "timestamp";
    case ScorePolicy::kStep:
      return "step";
    case ScorePolicy::kLfu:
      return "lfu";
    case ScorePolicy::kCustomized:
      return "customized";
  }
  return "unknown";
}

std::string to_string(SafeCheck mode) {
  switch (mode) {
    case SafeCheck::kError:
      return "error";
    case SafeCheck::kWarning:
      return "warning";
    case SafeCheck::kIgnore:
      return "ignore";
  }
  return "unknown";
}

std::string to_string(Backend backend) {
  return backend == Backend::kCpu ? "cpu" : "cuda";
}

ScorePolicy parse_score_policy(const std::string& name) {
  for (auto p :
       {ScorePolicy::kTimestamp, ScorePolicy::kStep, ScorePolicy::kLfu, ScorePolicy::kCustomized}) {
    if (to_string(p) == name) return p;
  }
  throw InvalidArgument("parse_score_policy: score_policy = \"" + name +
                        "\", must be timestamp, step, lfu or customized");
}

SafeCheck parse_safe_check(const std::string& name) {
  for (auto m : {SafeCheck::kError, SafeCheck::kWarning, SafeCheck::kIgnore}) {
    if (to_string(m) == name) return m;
  }
  throw InvalidArgument("parse_safe_check: safe_check = \"" + name +
                        "\", must be error, warning or ignore");
}

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  throw InvalidArgument("parse_backend: backend = \"" + name + "\", must be cpu or cuda");
}

}  // namespace dynemb

#include <cmath>
#include <string>

#include "dynemb/core/error.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb {

void validate_embedding_options(const EmbeddingOptions& o) {
  constexpr const char* w = "EmbeddingOptions";
  require(o.dim > 0, w, "dim", std::to_string(o.dim), "must be > 0");
  validate_optimizer(o.optimizer, w);
  validate_initializer(o.eval_initializer, "EmbeddingOptions.eval_initializer");
  require(o.ttl_steps == 0 || o.table.score_policy == ScorePolicy::kStep, w, "ttl_steps",
          std::to_string(o.ttl_steps),
          "needs table.score_policy = step (is " + to_string(o.table.score_policy) + ")");
  require(std::isfinite(o.ttl_seconds) && o.ttl_seconds >= 0.0, w, "ttl_seconds",
          std::to_string(o.ttl_seconds), "must be finite and >= 0");
  require(o.ttl_seconds == 0.0 || o.table.score_policy == ScorePolicy::kTimestamp, w, "ttl_seconds",
          std::to_string(o.ttl_seconds),
          "needs table.score_policy = timestamp (is " + to_string(o.table.score_policy) + ")");
  require(static_cast<int>(o.value_type) <= static_cast<int>(ValueType::kBFloat16), w, "value_type",
          std::to_string(static_cast<int>(o.value_type)), "must be float32, float16 or bfloat16");
  require(!o.stochastic_rounding || o.value_type != ValueType::kFloat32, w, "stochastic_rounding",
          "true", "needs value_type float16 or bfloat16 (is float32)");
  require(o.output_type == ValueType::kFloat32 || o.output_type == o.value_type, w, "output_type",
          to_string(o.output_type),
          "must be float32 or the rows' value_type (is " + to_string(o.value_type) + ")");
  require(!o.state_in_value_type || o.value_type == ValueType::kBFloat16, w, "state_in_value_type",
          "true",
          "needs value_type bfloat16 (is " + to_string(o.value_type) +
              "; float16's range flushes small second moments to 0)");
  require(static_cast<int>(o.gradient_check) <= static_cast<int>(SafeCheck::kIgnore), w,
          "gradient_check", std::to_string(static_cast<int>(o.gradient_check)),
          "must be error, warning or ignore");
}

uint32_t embedding_row_dim(const EmbeddingOptions& o) {
  const uint32_t unpadded =
      value_words(o.value_type, o.dim) +
      optimizer_state_words(o.optimizer.kind, o.dim,
                            o.state_in_value_type ? o.value_type : ValueType::kFloat32);
  if (!o.align_rows || o.dim % 4 != 0) return unpadded;
  return (unpadded + 3) / 4 * 4;
}

}  // namespace dynemb

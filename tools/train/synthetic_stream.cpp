#include "train/synthetic_stream.hpp"

#include <algorithm>
#include <cmath>

#include "dynemb/core/error.hpp"
#include "dynemb/core/initializer.hpp"
#include "train/feature_key.hpp"
#include "train/synthetic_math.hpp"

namespace dynemb::train {

std::vector<uint64_t> criteo_cardinalities() {
  return {39884406, 39043,    17289,    7420,     20263,  3,     7120, 1543, 63,
          38532951, 2953546,  403346,   10,       2208,   11938, 155,  4,    976,
          14,       39979771, 25641295, 39664984, 585935, 12972, 108,  36};
}

void validate_synthetic_options(const SyntheticOptions& o) {
  const char* where = "synthetic data";
  require(!o.cardinalities.empty() && o.cardinalities.size() <= kMaxFields, where, "fields",
          std::to_string(o.cardinalities.size()),
          "must be in [1, " + std::to_string(kMaxFields) + "]");
  for (size_t f = 0; f < o.cardinalities.size(); ++f) {
    require(o.cardinalities[f] >= 1 && o.cardinalities[f] <= kValueMask, where,
            ("cardinality of field " + std::to_string(f)).c_str(),
            std::to_string(o.cardinalities[f]), "must be in [1, 2^56)");
  }
  require(std::isfinite(o.zipf_alpha) && o.zipf_alpha > 1.0 && o.zipf_alpha <= 4.0, where,
          "zipf_alpha", std::to_string(o.zipf_alpha), "must be in (1, 4]");
  require(o.active_ids >= 1, where, "active_ids", std::to_string(o.active_ids), "must be >= 1");
  require(o.true_dim >= 1 && o.true_dim <= 256, where, "true_dim", std::to_string(o.true_dim),
          "must be in [1, 256]");
  require(std::isfinite(o.linear_std) && o.linear_std >= 0, where, "linear_std",
          std::to_string(o.linear_std), "must be >= 0");
  require(std::isfinite(o.factor_std) && o.factor_std >= 0, where, "factor_std",
          std::to_string(o.factor_std), "must be >= 0");
  require(std::isfinite(o.bias), where, "bias", std::to_string(o.bias), "must be finite");
  require(o.start_vocab > 0.0 && o.start_vocab <= 1.0, where, "start_vocab",
          std::to_string(o.start_vocab), "must be in (0, 1]");
  require(o.horizon >= 1, where, "horizon", std::to_string(o.horizon), "must be >= 1");
}

GroundTruthFm::GroundTruthFm(const SyntheticOptions& o) : options_(o) {
  InitializerOptions normal{InitializerKind::kNormal};
  normal.seed = o.seed ^ 0x5eed0f7e5eedull;
  const uint32_t width = 1 + o.true_dim;
  for (uint32_t f = 0; f < o.cardinalities.size(); ++f) {
    const uint64_t active = std::min<uint64_t>(o.cardinalities[f], o.active_ids);
    active_.push_back(active);
    std::vector<float> rows(active * width);
    for (uint64_t r = 0; r < active; ++r) {
      const uint64_t bits = feature_key(f, r);
      rows[r * width] = o.linear_std * initial_value(normal, bits, 0);
      for (uint32_t j = 1; j < width; ++j) {
        rows[r * width + j] = o.factor_std * initial_value(normal, bits, j);
      }
    }
    rows_.push_back(std::move(rows));
  }
}

const float* GroundTruthFm::params(uint32_t field, uint64_t rank) const {
  return rank < active_[field] ? rows_[field].data() + rank * (1 + options_.true_dim) : nullptr;
}

double GroundTruthFm::logit(const uint64_t* ranks) const {
  const uint32_t k = options_.true_dim;
  double sum[256] = {};
  double linear = options_.bias, squares = 0.0;
  for (uint32_t f = 0; f < num_fields(); ++f) {
    const float* p = params(f, ranks[f]);
    if (p == nullptr) continue;
    linear += p[0];
    for (uint32_t j = 0; j < k; ++j) {
      sum[j] += p[1 + j];
      squares += static_cast<double>(p[1 + j]) * p[1 + j];
    }
  }
  double pairs = -squares;
  for (uint32_t j = 0; j < k; ++j) pairs += sum[j] * sum[j];
  return linear + 0.5 * pairs;
}

SyntheticStream::SyntheticStream(const SyntheticOptions& options, bool eval)
    : options_(options), truth_((validate_synthetic_options(options), options)), eval_(eval) {}

double SyntheticStream::vocab_fraction(uint64_t t) const {
  return synthetic::vocab_fraction(eval_, t, options_.start_vocab, options_.horizon);
}

uint64_t SyntheticStream::key_of(uint32_t field, uint64_t rank) const {
  return synthetic::key_of(options_.seed, field, rank);
}

void SyntheticStream::generate(uint64_t t, SampleBatch& batch, uint64_t* ranks) const {
  uint64_t state = synthetic::first_state(options_.seed, t, eval_);
  const double fraction = vocab_fraction(t);
  const uint32_t fields = truth_.num_fields();
  for (uint32_t f = 0; f < fields; ++f) {
    const uint64_t n =
        synthetic::field_vocab(options_.cardinalities[f], fraction, options_.active_ids);
    ranks[f] = synthetic::zipf_rank(synthetic::uniform_open(state), options_.zipf_alpha, n);
    batch.add_id(key_of(f, ranks[f]), 1.0f);
  }
  const double p = synthetic::true_probability(truth_.logit(ranks));
  batch.true_probs.push_back(static_cast<float>(p));
  batch.end_sample(synthetic::uniform_open(state) < p ? 1.0f : 0.0f);
}

size_t SyntheticStream::next(SampleBatch& batch, size_t max_samples) {
  std::vector<uint64_t> ranks(truth_.num_fields());
  batch.keys.reserve(batch.keys.size() + max_samples * ranks.size());
  batch.values.reserve(batch.values.size() + max_samples * ranks.size());
  for (size_t i = 0; i < max_samples; ++i) generate(position_ + i, batch, ranks.data());
  position_ += max_samples;
  return max_samples;
}

uint64_t SyntheticStream::skip(uint64_t n) {
  position_ += n;
  return n;
}

std::string SyntheticStream::describe() const {
  return std::string(eval_ ? "held-out " : "") +
         "synthetic Criteo-like stream: " + std::to_string(truth_.num_fields()) +
         " fields, Zipf alpha " + std::to_string(options_.zipf_alpha).substr(0, 4) +
         ", hidden FM with " + std::to_string(options_.active_ids) + " active ids per field, dim " +
         std::to_string(options_.true_dim);
}

}  // namespace dynemb::train

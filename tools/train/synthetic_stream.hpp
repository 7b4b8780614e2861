// A Criteo-shaped synthetic CTR stream whose labels come from a hidden factorization machine,
// so the best achievable AUC is known. Sample t is a pure function of (seed, t): any position
// can be regenerated, which makes skip() (resume) exact and O(1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/sample_stream.hpp"

namespace dynemb::train {

// Criteo 1TB's 26 categorical cardinalities (3 .. ~40M).
std::vector<uint64_t> criteo_cardinalities();

struct SyntheticOptions {
  uint64_t seed = 1;
  std::vector<uint64_t> cardinalities = criteo_cardinalities();  // one entry per field
  double zipf_alpha = 1.2;    // ids of a field are drawn with P(rank r) ~ (r + 1)^-alpha
  uint32_t active_ids = 100;  // the hidden FM gives weights to the first ranks of each field only
  uint32_t true_dim = 4;      // the hidden FM's factor dimension
  float linear_std = 0.4f;    // stddev of the hidden FM's linear weights
  float factor_std = 0.15f;   // stddev of the hidden FM's factor elements
  float bias = -1.2f;         // the hidden FM's bias (sets the click rate)
  // Unseen ids over time: at sample t a field draws from its first
  // max(min(card, active_ids), card * (start_vocab + (1 - start_vocab) * min(1, t / horizon)))
  // ranks: the hidden FM's ids are there from the start, the tail grows.
  double start_vocab = 0.05;
  uint64_t horizon = 4'000'000;
};

// Throws InvalidArgument naming the bad field, its value and its limit.
void validate_synthetic_options(const SyntheticOptions& options);

// The hidden model: per field, `active` ranks with [w | v (true_dim)] each.
class GroundTruthFm {
 public:
  explicit GroundTruthFm(const SyntheticOptions& options);
  // The true logit of one sample given each field's rank.
  double logit(const uint64_t* ranks) const;
  uint32_t num_fields() const { return static_cast<uint32_t>(active_.size()); }
  // The ranks of `field` with parameters (min(cardinality, active_ids)).
  uint64_t active(uint32_t field) const { return active_[field]; }
  // The parameters of `field`: active(field) rows of [w | v (true_dim)].
  const std::vector<float>& field_rows(uint32_t field) const { return rows_[field]; }

 private:
  const float* params(uint32_t field, uint64_t rank) const;
  SyntheticOptions options_;
  std::vector<uint64_t> active_;          // per field
  std::vector<std::vector<float>> rows_;  // per field: active x (1 + true_dim)
};

class SyntheticStream final : public SampleStream {
 public:
  // A training stream starting at sample 0 (eval = false), or a held-out stream drawn from the
  // full vocabulary with an independent random sequence (eval = true).
  SyntheticStream(const SyntheticOptions& options, bool eval);
  size_t next(SampleBatch& batch, size_t max_samples) override;
  uint64_t skip(uint64_t n) override;
  bool has_ground_truth() const override { return true; }
  std::string describe() const override;
  // The table key of `rank` in `field` (what the stream emits for it).
  uint64_t key_of(uint32_t field, uint64_t rank) const;
  uint64_t position() const { return position_; }
  bool eval() const { return eval_; }
  const SyntheticOptions& options() const { return options_; }
  const GroundTruthFm& truth() const { return truth_; }

 private:
  void generate(uint64_t t, SampleBatch& batch, uint64_t* ranks) const;
  double vocab_fraction(uint64_t t) const;

  SyntheticOptions options_;
  GroundTruthFm truth_;
  bool eval_;
  uint64_t position_ = 0;
};

}  // namespace dynemb::train

// A batch of CTR samples in CSR form: sample s owns ids [offsets[s], offsets[s+1]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dynemb::train {

struct SampleBatch {
  std::vector<uint64_t> keys;       // feature keys (feature_key), all samples back to back
  std::vector<float> values;        // each id's value x_i (1 for a categorical feature)
  std::vector<int64_t> offsets{0};  // num_samples + 1
  std::vector<float> labels;        // 0 or 1
  std::vector<float> true_probs;    // the ground-truth click probability (synthetic data only)

  // Number of samples.
  size_t size() const { return labels.size(); }
  // Number of ids over all samples.
  size_t num_ids() const { return keys.size(); }
  // Empties the batch (capacity kept).
  void clear() {
    keys.clear();
    values.clear();
    offsets.assign(1, 0);
    labels.clear();
    true_probs.clear();
  }
  // Appends one id to the sample being built.
  void add_id(uint64_t key, float value) {
    keys.push_back(key);
    values.push_back(value);
  }
  // Closes the sample being built with its label.
  void end_sample(float label) {
    labels.push_back(label);
    offsets.push_back(static_cast<int64_t>(keys.size()));
  }
  // Appends every sample of `other`.
  void append(const SampleBatch& other) {
    const int64_t base = static_cast<int64_t>(keys.size());
    keys.insert(keys.end(), other.keys.begin(), other.keys.end());
    values.insert(values.end(), other.values.begin(), other.values.end());
    for (size_t s = 1; s < other.offsets.size(); ++s) offsets.push_back(base + other.offsets[s]);
    labels.insert(labels.end(), other.labels.begin(), other.labels.end());
    true_probs.insert(true_probs.end(), other.true_probs.begin(), other.true_probs.end());
  }
};

}  // namespace dynemb::train

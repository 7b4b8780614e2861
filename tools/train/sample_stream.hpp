// A source of training samples: the synthetic Criteo-like stream or a text-file reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "train/sample_batch.hpp"

namespace dynemb::train {

class SampleStream {
 public:
  virtual ~SampleStream() = default;
  // Appends up to max_samples next samples to `batch`; returns how many (0: the stream ended).
  virtual size_t next(SampleBatch& batch, size_t max_samples) = 0;
  // Skips the next n samples (as next() would have returned them); returns how many it skipped.
  virtual uint64_t skip(uint64_t n) = 0;
  // True when batches carry the ground-truth probabilities (true_probs).
  virtual bool has_ground_truth() const { return false; }
  // The fraction of a finite input read so far, in [0, 1]; negative when the stream has no end.
  virtual double fraction_read() const { return -1.0; }
  // One line saying what the stream is.
  virtual std::string describe() const = 0;
};

}  // namespace dynemb::train

// The synthetic stream generated on the GPU for `--device cuda`: the same samples as
// SyntheticStream (a pure function of (seed, t)), made by a CUDA kernel straight into a
// DeviceBatch, so the host never touches the ids.
#pragma once

#include <cstdint>
#include <string>

#include "dynemb/core/memory.hpp"
#include "train/device_batch.hpp"
#include "train/synthetic_stream.hpp"

namespace dynemb::train {

class GpuSyntheticStream {
 public:
  // A training stream starting at sample 0 (eval = false) or the held-out stream (eval = true),
  // on CUDA device `device`; throws NotAvailable without the CUDA backend.
  GpuSyntheticStream(const SyntheticOptions& options, bool eval, int device = 0);

  // Replaces `batch` with the next max_samples samples (keys, offsets, labels and true
  // probabilities on the device; labels also in batch.host_labels); returns max_samples.
  size_t next(DeviceBatch& batch, size_t max_samples);
  // Skips the next n samples; returns n.
  uint64_t skip(uint64_t n);
  uint64_t position() const { return position_; }
  std::string describe() const { return host_.describe() + " (generated on the GPU)"; }

 private:
  SyntheticStream host_;  // the options and the hidden FM's parameters
  int device_;
  uint64_t position_ = 0;
  BackendBuffer<uint64_t> cardinalities_, active_, param_offsets_;
  BackendBuffer<float> params_;
  BackendBuffer<uint32_t> rank_scratch_;
};

}  // namespace dynemb::train

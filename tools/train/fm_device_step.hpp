// FmModel's math on the GPU (`--device cuda`): the same FM and logistic-loss gradient as the host
// math, on rows the Embedding looks up into device memory. One lookup per id plus one for the
// bias (the bias gradient is summed over samples on the device); only the probabilities and the
// loss sum come back to the host.
#pragma once

#include <cstdint>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "train/device_batch.hpp"

namespace dynemb::train {

class FmDeviceStep {
 public:
  // Buffers on CUDA device `device` for an FM of `factor_dim` factors.
  FmDeviceStep(uint32_t factor_dim, int device);

  // forward, FM gradient, backward, end_step on `embedding` (a CUDA embedding of dim
  // factor_dim + 1); writes each sample's probability to probs, returns the summed log loss.
  double train_step(Embedding<uint64_t>& embedding, const DeviceBatchView& batch,
                    std::vector<float>& probs);
  // Probabilities without inserting anything (unknown keys read zeros).
  void predict(Embedding<uint64_t>& embedding, const DeviceBatchView& batch,
               std::vector<float>& probs);

 private:
  // Looks up the batch's ids and the bias into rows_.
  void lookup(Embedding<uint64_t>& embedding, const DeviceBatchView& batch, bool training);

  uint32_t factor_dim_;
  int device_;
  size_t identity_filled_ = 0;  // offsets_[0 .. identity_filled_] hold 0, 1, ...
  BackendBuffer<uint64_t> keys_;
  BackendBuffer<int64_t> offsets_;
  BackendBuffer<float> rows_, grads_, probs_;
  BackendBuffer<double> sample_scratch_, loss_sum_;
};

}  // namespace dynemb::train

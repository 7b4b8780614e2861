// A factorization machine for CTR: logit = bias + sum_i x_i w_i + sum_{i<j} x_i x_j <v_i, v_j>,
// every parameter in one dynamic table: the row of a feature key is [w | v (dim)], and the
// bias is the w of kBiasKey. Trained with the table's fused optimizer on logistic loss. The math
// runs where the table is: on the host for Backend::kCpu, in CUDA kernels (FmDeviceStep) for
// Backend::kCuda; both compute the same function.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dynemb/embedding/embedding.hpp"
#include "train/device_batch.hpp"
#include "train/sample_batch.hpp"

namespace dynemb::train {

class FmDeviceStep;

class FmModel {
 public:
  // `options.dim` must be factor_dim + 1 (w and v share a row).
  FmModel(Backend backend, const EmbeddingOptions& options);
  ~FmModel();

  // One training step on `batch`: forward, logistic-loss gradient (summed over samples),
  // backward with the fused optimizer, end of step. Writes each sample's predicted probability
  // to probs; returns the summed log loss.
  double train_step(const SampleBatch& batch, std::vector<float>& probs);

  // Predicted probabilities without inserting anything (unknown keys read zeros).
  void predict(const SampleBatch& batch, std::vector<float>& probs);

  // The same for a batch already in GPU memory (Backend::kCuda only).
  double train_step(const DeviceBatchView& batch, std::vector<float>& probs);
  void predict(const DeviceBatchView& batch, std::vector<float>& probs);

  Embedding<uint64_t>& embedding() { return embedding_; }
  const Embedding<uint64_t>& embedding() const { return embedding_; }
  uint32_t factor_dim() const { return factor_dim_; }

 private:
  // Looks up every id of the batch plus one bias id per sample into rows_.
  void lookup(const SampleBatch& batch, bool training);
  // The logit of sample s from rows_; fills factor_sum_ (dim floats) with sum_i x_i v_i.
  float logit(const SampleBatch& batch, size_t s, float* factor_sum) const;

  Embedding<uint64_t> embedding_;
  uint32_t factor_dim_;
  // Backend::kCuda: the GPU math and a staging batch for host batches; null on the cpu.
  std::unique_ptr<FmDeviceStep> device_;
  std::unique_ptr<DeviceBatch> staging_;
  std::vector<uint64_t> keys_;    // batch ids, then one bias id per sample
  std::vector<int64_t> offsets_;  // one bag per id (NONE pooling)
  std::vector<float> rows_, grads_, sums_;
};

}  // namespace dynemb::train

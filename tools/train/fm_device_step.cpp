#include "train/fm_device_step.hpp"

#include "dynemb/core/error.hpp"
#include "train/feature_key.hpp"
#include "train/gpu_kernels.hpp"

namespace dynemb::train {
namespace {

gpu::FmBatchArgs fm_args(const DeviceBatchView& batch, const float* rows, uint32_t factor_dim) {
  gpu::FmBatchArgs a;
  a.rows = rows;
  a.row_stride = factor_dim + 1;
  a.factor_dim = factor_dim;
  a.offsets = batch.offsets;
  a.values = batch.values;
  a.num_samples = batch.num_samples;
  a.num_ids = batch.num_ids;
  return a;
}

}  // namespace

FmDeviceStep::FmDeviceStep(uint32_t factor_dim, int device)
    : factor_dim_(factor_dim), device_(device) {
  loss_sum_ = BackendBuffer<double>(Backend::kCuda, 1, device);
}

void FmDeviceStep::lookup(Embedding<uint64_t>& embedding, const DeviceBatchView& batch,
                          bool training) {
  require(embedding.backend() == Backend::kCuda && embedding.options().dim == factor_dim_ + 1,
          "FmDeviceStep", "embedding", "backend/dim mismatch",
          "must be a cuda embedding of dim " + std::to_string(factor_dim_ + 1));
  const size_t n = batch.num_ids, lookups = n + 1;
  const uint32_t row = factor_dim_ + 1;
  grow_device_buffer(keys_, lookups, device_);
  gpu::copy_keys_and_append(batch.keys, n, kBiasKey, keys_.data());
  if (identity_filled_ < lookups) {
    grow_device_buffer(offsets_, lookups + 1, device_);
    gpu::fill_identity_offsets(offsets_.data(), offsets_.size() - 1);
    identity_filled_ = offsets_.size() - 1;
  }
  grow_device_buffer(rows_, lookups * row, device_);
  EmbeddingBatch<uint64_t> eb;
  eb.keys = keys_.data();
  eb.num_ids = lookups;
  eb.offsets = offsets_.data();
  eb.num_bags = lookups;
  eb.mode = PoolingMode::kNone;
  embedding.forward(eb, rows_.data(), row, training);
}

double FmDeviceStep::train_step(Embedding<uint64_t>& embedding, const DeviceBatchView& batch,
                                std::vector<float>& probs) {
  lookup(embedding, batch, true);
  const size_t b = batch.num_samples;
  const uint32_t row = factor_dim_ + 1;
  grow_device_buffer(grads_, (batch.num_ids + 1) * row, device_);
  grow_device_buffer(probs_, b, device_);
  grow_device_buffer(sample_scratch_, 2 * b, device_);
  gpu::fm_train(fm_args(batch, rows_.data(), factor_dim_), batch.labels, probs_.data(),
                grads_.data(), sample_scratch_.data(), loss_sum_.data());
  embedding.backward(grads_.data(), row);
  embedding.end_step();
  probs.resize(b);
  if (b > 0) probs_.download(probs.data(), b);
  double loss = 0.0;
  loss_sum_.download(&loss, 1);
  return loss;
}

void FmDeviceStep::predict(Embedding<uint64_t>& embedding, const DeviceBatchView& batch,
                           std::vector<float>& probs) {
  lookup(embedding, batch, false);
  const size_t b = batch.num_samples;
  grow_device_buffer(probs_, b, device_);
  gpu::fm_predict(fm_args(batch, rows_.data(), factor_dim_), probs_.data());
  probs.resize(b);
  if (b > 0) probs_.download(probs.data(), b);
}

}  // namespace dynemb::train

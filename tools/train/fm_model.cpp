#include "train/fm_model.hpp"

#include <algorithm>
#include <cmath>

#include "dynemb/core/error.hpp"
#include "train/feature_key.hpp"
#include "train/fm_device_step.hpp"

namespace dynemb::train {
namespace {

// log(1 + exp(z)) without overflow.
inline double softplus(double z) {
  return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
}

inline float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

constexpr float kLogitLimit = 40.0f;

}  // namespace

FmModel::FmModel(Backend backend, const EmbeddingOptions& options)
    : embedding_(backend, options), factor_dim_(options.dim - 1) {
  require(options.dim >= 2, "FmModel", "dim", std::to_string(options.dim),
          "must be >= 2 (w and at least one factor)");
  if (backend == Backend::kCuda) {
    device_ = std::make_unique<FmDeviceStep>(factor_dim_, options.table.device);
    staging_ = std::make_unique<DeviceBatch>(options.table.device);
  }
}

FmModel::~FmModel() = default;

double FmModel::train_step(const DeviceBatchView& batch, std::vector<float>& probs) {
  require(device_ != nullptr, "FmModel::train_step", "batch", "in GPU memory",
          "needs a cuda model (this one is on the cpu)");
  return device_->train_step(embedding_, batch, probs);
}

void FmModel::predict(const DeviceBatchView& batch, std::vector<float>& probs) {
  require(device_ != nullptr, "FmModel::predict", "batch", "in GPU memory",
          "needs a cuda model (this one is on the cpu)");
  device_->predict(embedding_, batch, probs);
}

void FmModel::lookup(const SampleBatch& batch, bool training) {
  const size_t n = batch.num_ids(), b = batch.size();
  keys_.resize(n + b);
  std::copy(batch.keys.begin(), batch.keys.end(), keys_.begin());
  std::fill(keys_.begin() + static_cast<std::ptrdiff_t>(n), keys_.end(), kBiasKey);
  offsets_.resize(n + b + 1);
  for (size_t i = 0; i <= n + b; ++i) offsets_[i] = static_cast<int64_t>(i);
  const uint32_t row = factor_dim_ + 1;
  rows_.resize((n + b) * row);
  EmbeddingBatch<uint64_t> eb;
  eb.keys = keys_.data();
  eb.num_ids = n + b;
  eb.offsets = offsets_.data();
  eb.num_bags = n + b;
  eb.mode = PoolingMode::kNone;
  embedding_.forward(eb, rows_.data(), row, training);
}

float FmModel::logit(const SampleBatch& batch, size_t s, float* sum) const {
  const uint32_t k = factor_dim_, row = k + 1;
  const size_t n = batch.num_ids();
  std::fill(sum, sum + k, 0.0f);
  float linear = rows_[(n + s) * row];  // the bias
  float squares = 0.0f;
  for (int64_t i = batch.offsets[s]; i < batch.offsets[s + 1]; ++i) {
    const float x = batch.values[i];
    const float* r = rows_.data() + i * row;
    linear += x * r[0];
    for (uint32_t j = 0; j < k; ++j) {
      const float xv = x * r[1 + j];
      sum[j] += xv;
      squares += xv * xv;
    }
  }
  float pairs = -squares;
  for (uint32_t j = 0; j < k; ++j) pairs += sum[j] * sum[j];
  const float z = linear + 0.5f * pairs;
  return std::clamp(z, -kLogitLimit, kLogitLimit);
}

double FmModel::train_step(const SampleBatch& batch, std::vector<float>& probs) {
  if (device_ != nullptr) {
    staging_->upload(batch);
    return device_->train_step(embedding_, staging_->view(), probs);
  }
  lookup(batch, true);
  const uint32_t k = factor_dim_, row = k + 1;
  const size_t n = batch.num_ids(), b = batch.size();
  grads_.assign((n + b) * row, 0.0f);
  sums_.resize(k);
  probs.resize(b);
  double loss = 0.0;
  for (size_t s = 0; s < b; ++s) {
    const float z = logit(batch, s, sums_.data());
    const float p = sigmoid(z);
    probs[s] = p;
    const float y = batch.labels[s];
    loss += softplus(z) - y * z;
    const float g = p - y;
    grads_[(n + s) * row] = g;
    for (int64_t i = batch.offsets[s]; i < batch.offsets[s + 1]; ++i) {
      const float x = batch.values[i];
      const float* r = rows_.data() + i * row;
      float* gr = grads_.data() + i * row;
      gr[0] = g * x;
      for (uint32_t j = 0; j < k; ++j) gr[1 + j] = g * x * (sums_[j] - x * r[1 + j]);
    }
  }
  embedding_.backward(grads_.data(), row);
  embedding_.end_step();
  return loss;
}

void FmModel::predict(const SampleBatch& batch, std::vector<float>& probs) {
  if (device_ != nullptr) {
    staging_->upload(batch);
    device_->predict(embedding_, staging_->view(), probs);
    return;
  }
  lookup(batch, false);
  sums_.resize(factor_dim_);
  probs.resize(batch.size());
  for (size_t s = 0; s < batch.size(); ++s) probs[s] = sigmoid(logit(batch, s, sums_.data()));
}

}  // namespace dynemb::train

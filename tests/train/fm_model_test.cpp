// The FM against a float64 model: predicted probabilities from the rows, and one SGD step's
// update of every touched row (gradients summed over every occurrence of a key); on the cpu and
// on the GPU (--device cuda: the CUDA kernels of tools/train/cuda, skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "core/backend_test.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/core/memory.hpp"
#include "train/feature_key.hpp"
#include "train/fm_model.hpp"

namespace dynemb::train {
namespace {

EmbeddingOptions sgd_options(uint32_t factor_dim, float lr) {
  EmbeddingOptions o;
  o.dim = factor_dim + 1;
  o.table.init_capacity = 1024;
  o.table.max_capacity = 1 << 14;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.initializer.kind = InitializerKind::kNormal;
  o.table.initializer.stddev = 0.3f;
  o.table.initializer.seed = 77;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = lr;
  return o;
}

SampleBatch random_batch(std::mt19937_64& rng, size_t samples) {
  SampleBatch b;
  std::uniform_real_distribution<float> value(0.2f, 1.5f);
  for (size_t s = 0; s < samples; ++s) {
    const int ids = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < ids; ++i) {
      b.add_id(feature_key(static_cast<uint32_t>(rng() % 3), rng() % 12), value(rng));
    }
    b.end_sample(static_cast<float>(rng() % 2));
  }
  return b;
}

// The stored row of `key` (empty if it has none), read through the backend's memory.
std::vector<float> stored_row(Table<uint64_t>& table, Backend backend, uint64_t key,
                              uint32_t width) {
  BackendBuffer<uint64_t> keys(backend, 1);
  BackendBuffer<float> row(backend, table.options().dim);
  BackendBuffer<bool> found(backend, 1);
  keys.upload(&key, 1);
  table.find(1, keys.data(), row.data(), found.data(), nullptr);
  bool has = false;
  found.download(&has, 1);
  if (!has) return {};
  std::vector<float> out(table.options().dim);
  row.download(out.data(), out.size());
  out.resize(width);
  return out;
}

class TrainFmModel : public dynemb::testing::BackendTest {};

TEST_P(TrainFmModel, StepMatchesFloat64Reference) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const uint32_t k = 3;
  const float lr = 0.1f;
  const Backend backend = GetParam();
  FmModel model(backend, sgd_options(k, lr));
  const InitializerOptions init = model.embedding().table().options().initializer;

  // Two steps: the second reads rows the first updated.
  std::map<uint64_t, std::vector<double>> rows;  // the float64 model
  auto row_of = [&](uint64_t key) -> std::vector<double>& {
    auto it = rows.find(key);
    if (it == rows.end()) {
      std::vector<double> r(k + 1);
      for (uint32_t j = 0; j <= k; ++j) r[j] = initial_value(init, key, j);
      it = rows.emplace(key, r).first;
    }
    return it->second;
  };
  for (int step = 0; step < 2; ++step) {
    const SampleBatch batch = random_batch(rng, 40);
    std::vector<float> probs;
    const double loss = model.train_step(batch, probs);

    std::map<uint64_t, std::vector<double>> grads;
    double ref_loss = 0;
    for (size_t s = 0; s < batch.size(); ++s) {
      std::vector<double> sum(k, 0.0);
      double z = row_of(kBiasKey)[0], squares = 0;
      for (int64_t i = batch.offsets[s]; i < batch.offsets[s + 1]; ++i) {
        const std::vector<double>& r = row_of(batch.keys[i]);
        const double x = batch.values[i];
        z += x * r[0];
        for (uint32_t j = 0; j < k; ++j) {
          sum[j] += x * r[1 + j];
          squares += x * r[1 + j] * x * r[1 + j];
        }
      }
      for (uint32_t j = 0; j < k; ++j) z += 0.5 * sum[j] * sum[j];
      z -= 0.5 * squares;
      const double p = 1 / (1 + std::exp(-z));
      EXPECT_NEAR(probs[s], p, 2e-5) << "sample " << s;
      const double y = batch.labels[s];
      ref_loss += -(y * std::log(p) + (1 - y) * std::log(1 - p));
      const double g = p - y;
      auto& gb = grads.try_emplace(kBiasKey, k + 1, 0.0).first->second;
      gb[0] += g;
      for (int64_t i = batch.offsets[s]; i < batch.offsets[s + 1]; ++i) {
        const std::vector<double>& r = row_of(batch.keys[i]);
        const double x = batch.values[i];
        auto& gr = grads.try_emplace(batch.keys[i], k + 1, 0.0).first->second;
        gr[0] += g * x;
        for (uint32_t j = 0; j < k; ++j) gr[1 + j] += g * x * (sum[j] - x * r[1 + j]);
      }
    }
    EXPECT_NEAR(loss, ref_loss, 1e-4 * batch.size());
    for (auto& [key, g] : grads) {
      std::vector<double>& r = row_of(key);
      for (uint32_t j = 0; j <= k; ++j) r[j] -= lr * g[j];
    }
    for (const auto& [key, r] : rows) {
      const std::vector<float> stored = stored_row(model.embedding().table(), backend, key, k + 1);
      ASSERT_EQ(stored.size(), k + 1) << "no row for key " << key;
      for (uint32_t j = 0; j <= k; ++j) {
        EXPECT_NEAR(stored[j], r[j], 1e-4 * (1 + std::abs(r[j]))) << "key " << key << " j " << j;
      }
    }
  }
  // predict() inserts nothing and reads zeros for unknown keys.
  SampleBatch unseen;
  unseen.add_id(feature_key(5, 123456), 1.0f);
  unseen.end_sample(1.0f);
  const size_t rows_before = model.embedding().table().size();
  std::vector<float> p;
  model.predict(unseen, p);
  EXPECT_NEAR(p[0], 1 / (1 + std::exp(-row_of(kBiasKey)[0])), 2e-5);
  EXPECT_EQ(model.embedding().table().size(), rows_before);
}

INSTANTIATE_TEST_SUITE_P(Backends, TrainFmModel, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

// The GPU model against the cpu model over several FTRL steps from the same initial rows: the
// same predictions (float tolerance: the GPU sums in another order) and the same rows. The GPU
// model takes its batches alternately from the host and already in device memory.
TEST(TrainFmModelCuda, MatchesTheCpuModelOverFtrlSteps) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA GPU";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const uint32_t k = 8;
  EmbeddingOptions o = sgd_options(k, 0.05f);
  o.table.initializer.stddev = 0.05f;
  o.optimizer.kind = OptimizerKind::kFtrl;
  FmModel cpu(Backend::kCpu, o), gpu(Backend::kCuda, o);
  DeviceBatch device_batch;
  std::vector<uint64_t> keys;
  for (int step = 0; step < 6; ++step) {
    const SampleBatch batch = random_batch(rng, 200 + rng() % 300);
    keys.insert(keys.end(), batch.keys.begin(), batch.keys.end());
    std::vector<float> p_cpu, p_gpu;
    const double loss_cpu = cpu.train_step(batch, p_cpu);
    double loss_gpu = 0.0;
    if (step % 2 == 0) {
      loss_gpu = gpu.train_step(batch, p_gpu);
    } else {
      device_batch.upload(batch);
      loss_gpu = gpu.train_step(device_batch.view(), p_gpu);
    }
    ASSERT_EQ(p_gpu.size(), batch.size());
    for (size_t s = 0; s < batch.size(); ++s) {
      EXPECT_NEAR(p_gpu[s], p_cpu[s], 1e-4) << "step " << step << " sample " << s;
    }
    EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * batch.size()) << "step " << step;
  }
  EXPECT_EQ(gpu.embedding().table().size(), cpu.embedding().table().size());
  keys.push_back(kBiasKey);
  for (uint64_t key : keys) {
    const std::vector<float> a = stored_row(cpu.embedding().table(), Backend::kCpu, key, k + 1);
    const std::vector<float> b = stored_row(gpu.embedding().table(), Backend::kCuda, key, k + 1);
    ASSERT_EQ(a.size(), b.size()) << "key " << key;
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_NEAR(b[j], a[j], 1e-4 * (1 + std::abs(a[j]))) << "key " << key << " j " << j;
    }
  }
  // Predictions on a fresh batch (some keys unseen), host and device batches alike.
  const SampleBatch fresh = random_batch(rng, 300);
  std::vector<float> p_cpu, p_gpu, p_dev;
  cpu.predict(fresh, p_cpu);
  gpu.predict(fresh, p_gpu);
  device_batch.upload(fresh);
  gpu.predict(device_batch.view(), p_dev);
  for (size_t s = 0; s < fresh.size(); ++s) {
    EXPECT_NEAR(p_gpu[s], p_cpu[s], 1e-4) << "sample " << s;
    EXPECT_EQ(p_dev[s], p_gpu[s]) << "sample " << s;
  }
}

}  // namespace
}  // namespace dynemb::train

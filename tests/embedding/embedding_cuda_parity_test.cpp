// The same training stream on the CPU and on the GPU: after 100 steps both tables hold the same
// keys with rows equal within float32 tolerance. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "embedding/concurrent_training.hpp"

namespace dynemb {
namespace {

// Trains `cpu` and `gpu` (same options) on the same random stream for `steps` steps, checking
// every forward's output, then that both tables hold the same keys with the same rows.
void expect_same_training(const EmbeddingOptions& o, Embedding<int64_t>& cpu,
                          Embedding<int64_t>& gpu, int steps, std::mt19937_64& rng) {
  const size_t bags = 512;
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<float> normal;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> keys;
    std::vector<int64_t> offsets{0};
    for (size_t b = 0; b < bags; ++b) {
      const int len = 1 + static_cast<int>(rng() % 6);
      for (int j = 0; j < len; ++j)
        keys.push_back(static_cast<int64_t>(std::pow(u(rng), 4) * 20000));
      offsets.push_back(static_cast<int64_t>(keys.size()));
    }
    std::vector<float> grad(bags * o.dim);
    for (auto& g : grad) g = normal(rng);
    const EmbeddingBatch<int64_t> hb{keys.data(), keys.size(), offsets.data(),
                                     bags,        nullptr,     PoolingMode::kMean};
    std::vector<float> cout(bags * o.dim);
    cpu.forward(hb, cout.data(), o.dim, true);
    cpu.backward(grad.data(), o.dim);
    cpu.end_step();

    BackendBuffer<int64_t> dk(Backend::kCuda, keys.size());
    dk.upload(keys.data(), keys.size());
    BackendBuffer<int64_t> doff(Backend::kCuda, offsets.size());
    doff.upload(offsets.data(), offsets.size());
    BackendBuffer<float> dout(Backend::kCuda, bags * o.dim), dgrad(Backend::kCuda, grad.size());
    dgrad.upload(grad.data(), grad.size());
    const EmbeddingBatch<int64_t> db{dk.data(), keys.size(), doff.data(),
                                     bags,      nullptr,     PoolingMode::kMean};
    gpu.forward(db, dout.data(), o.dim, true);
    gpu.backward(dgrad.data(), o.dim);
    gpu.end_step();
    backend_synchronize(Backend::kCuda);
    std::vector<float> gout(bags * o.dim);
    dout.download(gout.data(), gout.size());
    for (size_t i = 0; i < gout.size(); ++i) {
      ASSERT_NEAR(gout[i], cout[i], 1e-4 * (1 + std::abs(cout[i]))) << "step " << step;
    }
  }
  ASSERT_EQ(gpu.table().size(), cpu.table().size());
  std::map<int64_t, std::vector<float>> cpu_rows;
  cpu.table().for_each([&](int64_t k, std::span<const float> row, uint64_t) {
    cpu_rows[k].assign(row.begin(), row.end());
  });
  size_t compared = 0;
  gpu.table().for_each([&](int64_t k, std::span<const float> row, uint64_t) {
    auto it = cpu_rows.find(k);
    ASSERT_NE(it, cpu_rows.end()) << "key " << k << " only on the GPU";
    for (uint32_t j = 0; j < o.dim; ++j) {
      ASSERT_NEAR(row[j], it->second[j], 1e-4 * (1 + std::abs(it->second[j]))) << "key " << k;
    }
    ++compared;
  });
  EXPECT_EQ(compared, cpu_rows.size());
}

// The concurrent tests' options, with a larger table and a smaller learning rate.
EmbeddingOptions parity_options(OptimizerKind kind, uint64_t seed) {
  EmbeddingOptions o = embedding_test::training_options(16, kind, seed);
  o.table.max_capacity = 1 << 16;
  o.optimizer.learning_rate = 0.01f;
  return o;
}

TEST(EmbeddingCudaParity, HundredTrainingStepsAgreeWithCpu) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kRowWiseAdaGrad}) {
    const EmbeddingOptions o = parity_options(kind, rng());
    Embedding<int64_t> cpu(Backend::kCpu, o), gpu(Backend::kCuda, o);
    expect_same_training(o, cpu, gpu, 100, rng);
  }
}

// Counter admission on the GPU (the counter is a host table there too): the same keys get rows
// at the same steps, so outputs, rows and the admission counts agree with the CPU's.
TEST(EmbeddingCudaParity, CounterAdmissionAgreesWithCpu) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  EmbeddingOptions o = parity_options(OptimizerKind::kAdam, rng());
  o.admit_threshold = 2 + static_cast<uint32_t>(rng() % 4);
  o.admission_capacity = 1 << 13;  // smaller than the key range: the counter also evicts
  Embedding<int64_t> cpu(Backend::kCpu, o), gpu(Backend::kCuda, o);
  expect_same_training(o, cpu, gpu, 30, rng);
  const EmbeddingStats c = cpu.stats(), g = gpu.stats();
  EXPECT_EQ(g.rows_created, c.rows_created);
  EXPECT_EQ(g.admission_pending, c.admission_pending);
  EXPECT_GT(c.admission_pending, 0u) << "the stream should leave keys below the threshold";
  EXPECT_GT(c.rows_created, 0u);
}

}  // namespace
}  // namespace dynemb

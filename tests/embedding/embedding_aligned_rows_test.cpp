// Row padding (align_rows) and the training step's device-side counts: the row layout, zero
// padding that training never touches, stats counted without per-step synchronization, and
// the same training stream on the CPU and the GPU with hot keys, dim 128 and padded rows.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb {
namespace {

using K = int64_t;

EmbeddingOptions options(OptimizerKind kind, uint32_t dim) {
  EmbeddingOptions o;
  o.dim = dim;
  o.table.init_capacity = 1 << 12;
  o.table.max_capacity = 1 << 16;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.initializer.kind = InitializerKind::kUniform;
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = 0.01f;
  o.optimizer.eps = 1e-6f;
  return o;
}

TEST(EmbeddingAlignedRows, RowDimIsPaddedToFourFloatsWhenDimAllows) {
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdaGrad,
        OptimizerKind::kRowWiseAdaGrad, OptimizerKind::kRmsProp, OptimizerKind::kFtrl}) {
    for (uint32_t dim : {1u, 6u, 8u, 128u}) {
      EmbeddingOptions o = options(kind, dim);
      const uint32_t unpadded = dim + optimizer_state_dim(kind, dim);
      const uint32_t padded = dim % 4 == 0 ? (unpadded + 3) / 4 * 4 : unpadded;
      EXPECT_EQ(embedding_row_dim(o), padded) << to_string(kind) << " dim " << dim;
      Embedding<K> emb(Backend::kCpu, o);
      EXPECT_EQ(emb.row_dim(), padded);
      EXPECT_EQ(emb.table().options().dim, padded) << "the table's dim is the row dim";
      o.align_rows = false;
      EXPECT_EQ(embedding_row_dim(o), unpadded);
    }
  }
  EXPECT_EQ(embedding_row_dim(options(OptimizerKind::kAdam, 128)), 388u) << "385 padded";
}

TEST(EmbeddingAlignedRows, PaddingStaysZeroAndStatsCountOnTheDevice) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  EmbeddingOptions o = options(OptimizerKind::kAdam, 8);  // 8 + 17 = 25 -> 28
  o.gradient_check = SafeCheck::kIgnore;
  Embedding<K> emb(Backend::kCpu, o);
  ASSERT_EQ(emb.row_dim(), 28u);
  std::map<K, int> seen;
  uint64_t lookups = 0;
  std::normal_distribution<float> normal;
  for (int step = 0; step < 20; ++step) {
    std::vector<K> keys;
    std::vector<int64_t> offsets{0};
    for (int b = 0; b < 64; ++b) {
      for (int j = 0; j < 3; ++j) keys.push_back(static_cast<K>(rng() % 300));
      offsets.push_back(static_cast<int64_t>(keys.size()));
    }
    for (K k : keys) ++seen[k];
    lookups += keys.size();
    std::vector<float> out(64 * 8), grad(64 * 8);
    for (auto& g : grad) g = normal(rng);
    if (step == 7) grad[8 * 5 + 1] = NAN;  // bag 5's three keys
    const EmbeddingBatch<K> batch{keys.data(), keys.size(), offsets.data(),
                                  64,          nullptr,     PoolingMode::kSum};
    emb.forward(batch, out.data(), 8, true);
    emb.backward(grad.data(), 8);
    emb.end_step();
  }
  const EmbeddingStats s = emb.stats();
  EXPECT_EQ(s.rows_created, seen.size());
  EXPECT_EQ(s.lookups, lookups);
  EXPECT_GE(s.nonfinite_gradients, 1u);
  EXPECT_LE(s.nonfinite_gradients, 3u);
  size_t rows = 0;
  emb.table().for_each([&](K, std::span<const float> row, uint64_t) {
    ASSERT_EQ(row.size(), 28u);
    for (uint32_t j = 25; j < 28; ++j) EXPECT_EQ(row[j], 0.0f) << "padding";
    ++rows;
  });
  EXPECT_EQ(rows, seen.size());
}

TEST(EmbeddingAlignedRows, GpuTrainsLikeTheCpuWithHotKeysAndPaddedRows) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    SCOPED_TRACE(to_string(kind));
    const uint32_t dim = 128;
    EmbeddingOptions o = options(kind, dim);
    o.table.initializer.seed = rng();
    o.gradient_check = SafeCheck::kIgnore;
    Embedding<K> cpu(Backend::kCpu, o), gpu(Backend::kCuda, o);
    ASSERT_EQ(gpu.row_dim(), cpu.row_dim());
    const size_t bags = 2048;
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<double> uni(0, 1);
    for (int step = 0; step < 12; ++step) {
      std::vector<K> keys;
      std::vector<int64_t> offsets{0};
      for (size_t b = 0; b < bags; ++b) {
        for (int j = 0; j < 10; ++j) {
          // Key 1 in ~1/4 of the ids (hundreds of chunks); the rest Zipf-like.
          keys.push_back(rng() % 4 == 0 ? 1 : static_cast<K>(std::pow(uni(rng), 3) * 30000));
        }
        offsets.push_back(static_cast<int64_t>(keys.size()));
      }
      std::vector<float> grad(bags * dim);
      for (auto& g : grad) g = normal(rng) * 0.1f;
      if (step == 5) grad[dim * 9 + 100] = INFINITY;
      const EmbeddingBatch<K> hb{keys.data(), keys.size(), offsets.data(),
                                 bags,        nullptr,     PoolingMode::kSum};
      std::vector<float> cout(bags * dim);
      cpu.forward(hb, cout.data(), dim, true);
      cpu.backward(grad.data(), dim);
      cpu.end_step();

      BackendBuffer<K> dk(Backend::kCuda, keys.size());
      dk.upload(keys.data(), keys.size());
      BackendBuffer<int64_t> doff(Backend::kCuda, offsets.size());
      doff.upload(offsets.data(), offsets.size());
      BackendBuffer<float> dout(Backend::kCuda, bags * dim), dgrad(Backend::kCuda, grad.size());
      dgrad.upload(grad.data(), grad.size());
      const EmbeddingBatch<K> db{dk.data(), keys.size(), doff.data(),
                                 bags,      nullptr,     PoolingMode::kSum};
      gpu.forward(db, dout.data(), dim, true);
      gpu.backward(dgrad.data(), dim);
      gpu.end_step();
      std::vector<float> gout(bags * dim);
      dout.download(gout.data(), gout.size());
      for (size_t i = 0; i < gout.size(); ++i) {
        ASSERT_NEAR(gout[i], cout[i], 1e-4 * (1 + std::abs(cout[i]))) << "step " << step;
      }
    }
    const EmbeddingStats cs = cpu.stats(), gs = gpu.stats();
    EXPECT_EQ(gs.rows_created, cs.rows_created);
    EXPECT_EQ(gs.unique_lookups, cs.unique_lookups);
    EXPECT_EQ(gs.nonfinite_gradients, cs.nonfinite_gradients);
    EXPECT_GE(gs.nonfinite_gradients, 1u);
    ASSERT_EQ(gpu.table().size(), cpu.table().size());
    std::map<K, std::vector<float>> cpu_rows;
    cpu.table().for_each([&](K k, std::span<const float> row, uint64_t) {
      cpu_rows[k].assign(row.begin(), row.end());
    });
    gpu.table().for_each([&](K k, std::span<const float> row, uint64_t) {
      auto it = cpu_rows.find(k);
      ASSERT_NE(it, cpu_rows.end()) << "key " << k << " only on the GPU";
      for (uint32_t j = 0; j < gpu.row_dim(); ++j) {
        ASSERT_NEAR(row[j], it->second[j], 1e-4 * (1 + std::abs(it->second[j])))
            << "key " << k << " element " << j;
      }
    });
  }
}

}  // namespace
}  // namespace dynemb

// The trainable table against a float64 model of forward (pooling), backward (per-key
// gradient sums) and the optimizer, plus admission, expiry, eval mode and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/core/log.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "ops/reference_optimizer.hpp"

namespace dynemb {
namespace {

using K = int64_t;

struct HostBatch {
  std::vector<K> keys;
  std::vector<int64_t> offsets{0};
  std::vector<float> weights;
  EmbeddingBatch<K> view(PoolingMode mode, bool weighted) const {
    return {keys.data(),
            keys.size(),
            offsets.data(),
            offsets.size() - 1,
            weighted ? weights.data() : nullptr,
            mode};
  }
};

// Zipf-ish repeated keys in random bags.
HostBatch random_batch(std::mt19937_64& rng, size_t bags, uint64_t key_space) {
  HostBatch b;
  std::uniform_int_distribution<int> len(0, 5);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < bags; ++i) {
    const int l = len(rng);
    for (int j = 0; j < l; ++j) {
      auto k = static_cast<K>(std::pow(u(rng), 3.0) * key_space);
      if (k < 40) k -= 100000;  // some negative keys (far from the reserved -16 .. -1)
      b.keys.push_back(k);
      b.weights.push_back(0.5f + normal(rng) * 0.1f);
    }
    b.offsets.push_back(static_cast<int64_t>(b.keys.size()));
  }
  return b;
}

EmbeddingOptions small_options(OptimizerKind kind, uint32_t dim) {
  EmbeddingOptions o;
  o.dim = dim;
  o.table.init_capacity = 1024;
  o.table.max_capacity = 1 << 14;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.initializer.kind = InitializerKind::kNormal;
  o.table.initializer.stddev = 0.1f;
  o.table.initializer.seed = 17;
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = kind == OptimizerKind::kSgd ? 0.1f : 0.01f;
  o.optimizer.eps = 1e-6f;
  o.optimizer.initial_accumulator = 0.05f;
  return o;
}

class EmbeddingTraining
    : public testing::TestWithParam<std::tuple<OptimizerKind, PoolingMode, bool>> {};

TEST_P(EmbeddingTraining, MatchesFloat64ModelOverSteps) {
  const auto [kind, mode, weighted] = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr uint32_t kDim = 8;
  const EmbeddingOptions opts = small_options(kind, kDim);
  Embedding<K> emb(Backend::kCpu, opts);
  std::map<K, test::RefRow> model;
  std::normal_distribution<float> normal;

  for (int step = 0; step < 30; ++step) {
    const HostBatch b = random_batch(rng, 64, 300);
    const size_t out_rows = mode == PoolingMode::kNone ? b.keys.size() : 64;
    std::vector<float> out(out_rows * kDim, NAN);
    emb.forward(b.view(mode, weighted), out.data(), kDim, true);

    // Model forward: new keys start from the initializer's row.
    for (K k : b.keys) {
      if (model.count(k)) continue;
      test::RefRow r;
      for (uint32_t j = 0; j < kDim; ++j)
        r.w.push_back(initial_value(opts.table.initializer, key_bits(k), j));
      r.a.assign(kDim, kind == OptimizerKind::kAdaGrad ? opts.optimizer.initial_accumulator : 0.0);
      r.b.assign(kDim, kind == OptimizerKind::kFtrl ? opts.optimizer.initial_accumulator : 0.0);
      r.row_acc = kind == OptimizerKind::kRowWiseAdaGrad ? opts.optimizer.initial_accumulator : 0.0;
      model[k] = r;
    }
    std::vector<float> grad(out_rows * kDim);
    for (auto& g : grad) g = normal(rng);
    std::map<K, std::vector<double>> key_grad;
    for (size_t bag = 0; bag + 1 < b.offsets.size(); ++bag) {
      const int64_t begin = b.offsets[bag], end = b.offsets[bag + 1];
      std::vector<double> acc(kDim, 0.0);
      for (int64_t i = begin; i < end; ++i) {
        const double w = weighted ? b.weights[i] : 1.0;
        const double f = mode == PoolingMode::kMean ? w / double(end - begin) : w;
        auto& kg = key_grad[b.keys[i]];
        kg.resize(kDim, 0.0);
        for (uint32_t j = 0; j < kDim; ++j) {
          const double v = model[b.keys[i]].w[j];
          const size_t orow = mode == PoolingMode::kNone ? i : bag;
          if (mode == PoolingMode::kNone) {
            ASSERT_NEAR(out[orow * kDim + j], w * v, 1e-4) << "step " << step << " id " << i;
          }
          acc[j] += f * v;
          kg[j] += f * grad[orow * kDim + j];
        }
      }
      if (mode != PoolingMode::kNone) {
        for (uint32_t j = 0; j < kDim; ++j) {
          ASSERT_NEAR(out[bag * kDim + j], acc[j], 2e-4 * (1 + std::abs(acc[j])))
              << "step " << step << " bag " << bag;
        }
      }
    }
    emb.backward(grad.data(), kDim);
    for (auto& [k, g] : key_grad) test::ref_update(opts.optimizer, model[k], g);
    emb.end_step();
  }
  // Every model row against the table's row.
  ASSERT_EQ(emb.table().size(), model.size());
  std::vector<float> row(emb.row_dim());
  double max_err = 0;
  for (const auto& [k, r] : model) {
    bool found = false;
    emb.table().find(1, &k, row.data(), &found, nullptr);
    ASSERT_TRUE(found) << k;
    for (uint32_t j = 0; j < kDim; ++j) {
      max_err = std::max(max_err, std::abs(row[j] - r.w[j]) / std::max(1e-2, std::abs(r.w[j])));
    }
  }
  EXPECT_LT(max_err, 5e-3);
}

INSTANTIATE_TEST_SUITE_P(
    OptimizersAndPooling, EmbeddingTraining,
    testing::Combine(testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdam,
                                     OptimizerKind::kAdaGrad, OptimizerKind::kRowWiseAdaGrad,
                                     OptimizerKind::kRmsProp, OptimizerKind::kFtrl),
                     testing::Values(PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone),
                     testing::Bool()),
    [](const auto& info) {
      return to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_weighted" : "");
    });

TEST(EmbeddingEval, NeverInsertsAndReadsTheEvalInitializer) {
  EmbeddingOptions o = small_options(OptimizerKind::kSgd, 4);
  o.eval_initializer.kind = InitializerKind::kConstant;
  o.eval_initializer.value = 0.25f;
  Embedding<K> emb(Backend::kCpu, o);
  HostBatch b;
  b.keys = {10, 11, 10};
  b.offsets = {0, 1, 3};
  std::vector<float> out(2 * 4);
  emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, /*training=*/false);
  EXPECT_EQ(emb.table().size(), 0u);
  EXPECT_FLOAT_EQ(out[0], 0.25f);
  EXPECT_FLOAT_EQ(out[4], 0.5f);
  EXPECT_EQ(emb.stats().eval_misses, 2u);
  EXPECT_THROW(emb.backward(out.data(), 4), InvalidArgument) << "no training forward pending";
  // After training, eval reads the stored (trained) row.
  emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, true);
  std::vector<float> grad(8, 1.0f);
  emb.backward(grad.data(), 4);
  std::vector<float> eval(8);
  emb.forward(b.view(PoolingMode::kSum, false), eval.data(), 4, false);
  std::vector<float> row(emb.row_dim());
  bool found;
  const K k = 10;
  emb.table().find(1, &k, row.data(), &found, nullptr);
  ASSERT_TRUE(found);
  EXPECT_FLOAT_EQ(eval[0], row[0]);
}

TEST(EmbeddingAdmission, KeyGetsARowAfterThresholdSightings) {
  EmbeddingOptions o = small_options(OptimizerKind::kSgd, 4);
  o.admit_threshold = 3;
  Embedding<K> emb(Backend::kCpu, o);
  HostBatch b;
  b.keys = {7, 8, 8};  // 7 seen once per step, 8 twice
  b.offsets = {0, 1, 3};
  std::vector<float> out(8), grad(8, 1.0f);
  emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, true);
  EXPECT_EQ(emb.table().size(), 0u) << "no key reached 3 sightings";
  EXPECT_FLOAT_EQ(out[0], 0.0f) << "pending keys read the eval initializer (zeros)";
  emb.backward(grad.data(), 4);  // no rows: nothing to update
  EXPECT_EQ(emb.table().size(), 0u);
  emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, true);  // 8 reaches 4 sightings
  EXPECT_EQ(emb.table().size(), 1u);
  bool found = false;
  std::vector<float> row(emb.row_dim());
  const K k8 = 8;
  emb.table().find(1, &k8, row.data(), &found, nullptr);
  EXPECT_TRUE(found);
  EXPECT_FLOAT_EQ(out[4], 2 * initial_value(o.table.initializer, key_bits(k8), 0));
  emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, true);  // 7 reaches 3
  EXPECT_EQ(emb.table().size(), 2u);
  EXPECT_EQ(emb.stats().rows_created, 2u);
  EXPECT_GE(emb.stats().admission_pending, 3u);
}

TEST(EmbeddingExpiry, RowsUntouchedForTtlStepsAreErasedAndCounted) {
  EmbeddingOptions o = small_options(OptimizerKind::kSgd, 4);
  o.ttl_steps = 2;
  Embedding<K> emb(Backend::kCpu, o);
  std::vector<float> out(8), grad(8, 0.0f);
  HostBatch a;
  a.keys = {1, 2};
  a.offsets = {0, 1, 2};
  HostBatch only1;
  only1.keys = {1};
  only1.offsets = {0, 1};
  emb.forward(a.view(PoolingMode::kSum, false), out.data(), 4, true);  // step 0: 1, 2
  emb.backward(grad.data(), 4);
  EXPECT_EQ(emb.end_step(), 0u);
  for (int s = 1; s <= 3; ++s) {  // steps 1..3 touch key 1 only
    emb.forward(only1.view(PoolingMode::kSum, false), out.data(), 4, true);
    emb.backward(grad.data(), 4);
    emb.end_step();
  }
  bool found[2];
  std::vector<float> rows(2 * emb.row_dim());
  emb.table().find(2, a.keys.data(), rows.data(), found, nullptr);
  EXPECT_TRUE(found[0]);
  EXPECT_FALSE(found[1]) << "key 2 last touched at step 0, ttl 2 steps";
  EXPECT_EQ(emb.stats().expired, 1u);
}

TEST(EmbeddingGradients, NonFiniteRowsAreSkippedOrRaise) {
  for (SafeCheck mode : {SafeCheck::kIgnore, SafeCheck::kError}) {
    EmbeddingOptions o = small_options(OptimizerKind::kAdam, 4);
    o.gradient_check = mode;
    Embedding<K> emb(Backend::kCpu, o);
    HostBatch b;
    b.keys = {5, 6};
    b.offsets = {0, 1, 2};
    std::vector<float> out(8);
    emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, true);
    std::vector<float> before(2 * emb.row_dim());
    bool found[2];
    emb.table().find(2, b.keys.data(), before.data(), found, nullptr);
    std::vector<float> grad = {1, 1, 1, 1, 1, NAN, 1, 1};
    if (mode == SafeCheck::kError) {
      EXPECT_THROW(emb.backward(grad.data(), 4), InvalidArgument);
    } else {
      emb.backward(grad.data(), 4);
    }
    std::vector<float> after(2 * emb.row_dim());
    emb.table().find(2, b.keys.data(), after.data(), found, nullptr);
    for (uint32_t j = 0; j < emb.row_dim(); ++j) {
      EXPECT_EQ(after[emb.row_dim() + j], before[emb.row_dim() + j]) << "key 6 unchanged";
    }
    if (mode == SafeCheck::kIgnore) {
      EXPECT_NE(after[0], before[0]) << "key 5 trained";
    } else {
      EXPECT_EQ(after[0], before[0]) << "ERROR: no row changed";
    }
    EXPECT_EQ(emb.stats().nonfinite_gradients, 1u);
  }
}

TEST(EmbeddingBatches, EmptyBagsAndEmptyBatchesWork) {
  Embedding<K> emb(Backend::kCpu, small_options(OptimizerKind::kAdam, 4));
  HostBatch b;
  b.offsets = {0, 0, 0};  // two bags, no ids
  std::vector<float> out(8, NAN), grad(8, 1.0f);
  emb.forward(b.view(PoolingMode::kMean, false), out.data(), 4, true);
  for (float v : out) EXPECT_EQ(v, 0.0f) << "an empty bag pools to zeros";
  emb.backward(grad.data(), 4);
  EXPECT_EQ(emb.end_step(), 0u);
  HostBatch none;  // no bags at all
  emb.forward(none.view(PoolingMode::kSum, false), out.data(), 4, true);
  emb.backward(grad.data(), 4);
  EXPECT_EQ(emb.table().size(), 0u);
}

TEST(EmbeddingBadInput, BadOffsetsLeaveTheTableUnchanged) {
  Embedding<K> emb(Backend::kCpu, small_options(OptimizerKind::kSgd, 4));
  HostBatch b;
  b.keys = {1, 2, 3};
  b.offsets = {0, 2, 1};
  std::vector<float> out(8);
  EXPECT_THROW(emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, true), InvalidArgument);
  b.offsets = {0, 2, 4};  // past the end of the ids
  EXPECT_THROW(emb.forward(b.view(PoolingMode::kSum, false), out.data(), 4, true), InvalidArgument);
  EXPECT_EQ(emb.table().size(), 0u);
  EXPECT_THROW(emb.forward(b.view(PoolingMode::kSum, false), out.data(), 2, true), InvalidArgument)
      << "output stride below dim";
  EmbeddingOptions bad = small_options(OptimizerKind::kSgd, 4);
  bad.ttl_steps = 3;
  bad.table.score_policy = ScorePolicy::kLfu;
  EXPECT_THROW(Embedding<K>(Backend::kCpu, bad), InvalidArgument);
}

TEST(EmbeddingEviction, DropsEmbeddingAndOptimizerStateTogether) {
  EmbeddingOptions o = small_options(OptimizerKind::kAdam, 4);
  o.table.bucket_capacity = 16;
  o.table.init_capacity = o.table.max_capacity = 16;  // one bucket
  Embedding<K> emb(Backend::kCpu, o);
  std::vector<float> out(4), grad(4, 1.0f), row(emb.row_dim());
  HostBatch one;
  one.keys = {1000};
  one.offsets = {0, 1};
  emb.forward(one.view(PoolingMode::kSum, false), out.data(), 4, true);
  emb.backward(grad.data(), 4);
  emb.end_step();
  // 16 newer keys push key 1000 (the oldest step) out of the only bucket.
  HostBatch many;
  for (K k = 0; k < 16; ++k) many.keys.push_back(k);
  many.offsets = {0, 16};
  emb.forward(many.view(PoolingMode::kSum, false), out.data(), 4, true);
  emb.backward(grad.data(), 4);
  emb.end_step();
  EXPECT_GE(emb.stats().table.evictions, 1u);
  bool found = true;
  emb.table().find(1, &one.keys[0], row.data(), &found, nullptr);
  EXPECT_FALSE(found);
  // Back again, it starts from a fresh row: initializer embedding, zero Adam state.
  emb.forward(one.view(PoolingMode::kSum, false), out.data(), 4, true);
  emb.table().find(1, &one.keys[0], row.data(), &found, nullptr);
  ASSERT_TRUE(found);
  EXPECT_FLOAT_EQ(row[0], initial_value(o.table.initializer, key_bits(one.keys[0]), 0));
  for (uint32_t j = 4; j < emb.row_dim(); ++j) EXPECT_EQ(row[j], 0.0f) << j;
}

}  // namespace
}  // namespace dynemb

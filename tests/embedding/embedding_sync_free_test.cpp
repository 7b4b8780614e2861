// EmbeddingCollection's host-sync-free training step against its synchronizing step (the
// reference): the same batches, step after step, give the same pooled outputs, rows, scores and
// counts, bit for bit. A batch with a key wider than the step's key bits, or with bad offsets, is
// refused on the device: counted, no table changed, the output reads the eval initializer. CPU,
// and CUDA with a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding_collection.hpp"
#include "embedding/table_contents.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

using ops_test::download;
using ops_test::upload;

using K = int64_t;

using embedding_test::Contents;
using embedding_test::contents;

EmbeddingOptions table_options(uint32_t dim, uint64_t seed, ScorePolicy policy) {
  EmbeddingOptions o;
  o.dim = dim;
  o.table.init_capacity = o.table.max_capacity = 1 << 14;
  o.table.score_policy = policy;
  o.table.initializer.kind = InitializerKind::kUniform;
  o.table.initializer.seed = seed;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.optimizer.learning_rate = 0.05f;
  return o;
}

// Every table's batch of one step, in backend memory.
struct StepBatches {
  std::vector<BackendBuffer<K>> keys;
  std::vector<BackendBuffer<int64_t>> offsets;
  std::vector<BackendBuffer<float>> weights;
  std::vector<EmbeddingBatch<K>> batches;
  size_t bags = 0;
};

// Random batches of keys below 2^key_bits, half on a few hot keys; some tables get no ids or no
// bags.
StepBatches draw_step(Backend backend, std::mt19937_64& rng, size_t num_tables, int step,
                      int key_bits, bool weighted, PoolingMode mode,
                      std::vector<std::set<K>>& seen) {
  StepBatches s;
  std::normal_distribution<float> normal;
  for (size_t t = 0; t < num_tables; ++t) {
    std::vector<K> keys;
    std::vector<int64_t> offsets{0};
    std::vector<float> weights;
    const size_t bags = (step + t) % 7 == 3 ? 0 : 1 + rng() % 60;
    for (size_t b = 0; b < bags; ++b) {
      const size_t len = (step + t) % 5 == 2 ? 0 : rng() % 7;
      for (size_t j = 0; j < len; ++j) {
        const K key = rng() % 2 == 0 ? static_cast<K>(rng() % 8)
                                     : static_cast<K>(rng() & ((uint64_t{1} << key_bits) - 1));
        keys.push_back(key);
        weights.push_back(normal(rng));
        seen[t].insert(key);
      }
      offsets.push_back(static_cast<int64_t>(keys.size()));
    }
    if (bags == 0) offsets.clear();
    s.keys.push_back(upload(backend, keys));
    s.offsets.push_back(upload(backend, offsets));
    s.weights.push_back(upload(backend, weights));
    s.batches.push_back({s.keys[t].data(), keys.size(), bags == 0 ? nullptr : s.offsets[t].data(),
                         bags, weighted ? s.weights[t].data() : nullptr, mode});
    s.bags += bags;
  }
  return s;
}

class EmbeddingSyncFreeTest : public dynemb::testing::BackendTest {};

TEST_P(EmbeddingSyncFreeTest, MatchesTheSynchronizingStep) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed; replay with DYNEMB_TEST_SEED
  std::mt19937_64& rng = test_rng.engine();
  // key_bits 0: the width is learned by the first (synchronizing) step; 24: declared.
  for (const uint32_t declared : {0u, 24u}) {
    SCOPED_TRACE("key_bits " + std::to_string(declared));
    const uint32_t dim = 8 + 4 * static_cast<uint32_t>(rng() % 3);
    const size_t num_tables = 1 + rng() % 5;
    const bool weighted = rng() % 2 == 0;
    const PoolingMode mode = rng() % 2 == 0 ? PoolingMode::kSum : PoolingMode::kMean;
    std::vector<EmbeddingOptions> options;
    for (size_t t = 0; t < num_tables; ++t) {
      options.push_back(
          table_options(dim, rng(), t % 2 == 0 ? ScorePolicy::kStep : ScorePolicy::kLfu));
      // WARNING tables look up their counted keys on the device; ERROR (and LFU) ones read the
      // count back first.
      if (t % 3 != 2) options.back().table.safe_check = SafeCheck::kWarning;
    }
    EmbeddingCollection<K> reference(backend, options);
    EmbeddingCollection<K> collection(backend, options);
    // Lookups on the step's stream, or forked to 2-4 side streams.
    const uint32_t lookup_streams = 1 + static_cast<uint32_t>(rng() % 4);
    SCOPED_TRACE("lookup_streams " + std::to_string(lookup_streams));
    collection.set_host_sync_free(true, declared, lookup_streams);
    ASSERT_TRUE(collection.host_sync_free());

    std::vector<std::set<K>> seen(num_tables);
    std::normal_distribution<float> normal;
    for (int step = 0; step < 8; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      // Keys of 20 bits from the first step on: the learned width holds for the later steps.
      StepBatches s = draw_step(backend, rng, num_tables, step, 20, weighted, mode, seen);
      std::vector<float> grad(s.bags * dim);
      for (auto& g : grad) g = normal(rng);
      auto grad_buffer = upload(backend, grad);
      BackendBuffer<float> out(backend, s.bags * dim + 1), ref_out(backend, s.bags * dim + 1);
      collection.forward(s.batches, out.data(), dim, true);
      collection.backward(grad_buffer.data(), dim);
      reference.forward(s.batches, ref_out.data(), dim, true);
      reference.backward(grad_buffer.data(), dim);
      backend_synchronize(backend);
      EXPECT_EQ(download(out, s.bags * dim), download(ref_out, s.bags * dim));

      const EmbeddingCollectionStats got = collection.stats(), want = reference.stats();
      EXPECT_EQ(got.refused_batches, 0u);
      for (size_t t = 0; t < num_tables; ++t) {
        SCOPED_TRACE("table " + std::to_string(t));
        const std::vector<K> all(seen[t].begin(), seen[t].end());
        const Contents a = contents(backend, collection.table(t), all);
        const Contents b = contents(backend, reference.table(t), all);
        EXPECT_EQ(a.found, b.found);
        EXPECT_EQ(a.rows, b.rows);
        EXPECT_EQ(a.scores, b.scores);
        EXPECT_EQ(got.tables[t].lookups, want.tables[t].lookups);
        EXPECT_EQ(got.tables[t].unique_lookups, want.tables[t].unique_lookups);
        EXPECT_EQ(got.tables[t].rows_created, want.tables[t].rows_created);
        EXPECT_EQ(collection.table(t).size(), reference.table(t).size());
      }
      EXPECT_EQ(collection.end_step(), reference.end_step());
    }
  }
}

TEST_P(EmbeddingSyncFreeTest, RefusesWideKeysAndBadOffsetsOnTheDevice) {
  const Backend backend = GetParam();
  std::vector<EmbeddingOptions> options{table_options(8, 1, ScorePolicy::kStep),
                                        table_options(8, 2, ScorePolicy::kStep)};
  options[0].table.safe_check = SafeCheck::kWarning;
  EmbeddingCollection<K> collection(backend, options);
  collection.set_host_sync_free(true, 16);
  const std::vector<K> keys{1, 2, 3, 4};
  const std::vector<K> wide{1, K{1} << 20, 3, 4};
  const std::vector<int64_t> offsets{0, 2, 4}, decreasing{0, 3, 2}, short_offsets{0, 2, 3};
  auto k = upload(backend, keys);
  auto w = upload(backend, wide);
  auto o = upload(backend, offsets);
  auto dec = upload(backend, decreasing);
  auto so = upload(backend, short_offsets);
  const EmbeddingBatch<K> good{k.data(), 4, o.data(), 2, nullptr, PoolingMode::kSum};
  std::vector<float> ones(4 * 8, 1.0f);
  auto grad = upload(backend, ones);
  BackendBuffer<float> out(backend, 4 * 8);
  uint64_t refused = 0;
  auto expect_refused = [&](std::vector<EmbeddingBatch<K>> batches, const char* what) {
    SCOPED_TRACE(what);
    const std::vector<float> nan(4 * 8, std::nanf(""));
    copy_to_backend(backend, out.data(), nan.data(), nan.size() * sizeof(float));
    collection.forward(batches, out.data(), 8, true);
    collection.backward(grad.data(), 8);
    backend_synchronize(backend);
    EXPECT_EQ(collection.stats().refused_batches, ++refused);
    for (size_t t = 0; t < 2; ++t) EXPECT_EQ(collection.table(t).size(), 0u);
    // Every bag read the eval initializer (zeros).
    EXPECT_EQ(download(out, 4 * 8), std::vector<float>(4 * 8, 0.0f));
  };
  EmbeddingBatch<K> too_wide = good;
  too_wide.keys = w.data();
  expect_refused({good, too_wide}, "a key of 21 bits");
  EmbeddingBatch<K> bad = good;
  bad.offsets = dec.data();
  expect_refused({bad, good}, "decreasing offsets");
  bad.offsets = so.data();
  expect_refused({good, bad}, "offsets short of num_ids");

  // A good batch then goes through.
  collection.forward(std::vector<EmbeddingBatch<K>>{good, good}, out.data(), 8, true);
  collection.backward(grad.data(), 8);
  backend_synchronize(backend);
  for (size_t t = 0; t < 2; ++t) EXPECT_EQ(collection.table(t).size(), 4u);
  EXPECT_EQ(collection.stats().refused_batches, refused);
  EXPECT_THROW(collection.set_host_sync_free(true, 64), InvalidArgument);
  EXPECT_THROW(collection.set_host_sync_free(true, 16, 0), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, EmbeddingSyncFreeTest, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

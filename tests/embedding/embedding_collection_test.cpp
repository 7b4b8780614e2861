// EmbeddingCollection against one Embedding per table (the reference): the same batches, step
// after step, give the same pooled outputs, rows, scores and counts, bit for bit (no table
// evicts). Keys widen during the run, so the collection re-combines its keys. Bad input and
// options throw and leave every table as it was. CPU, and CUDA with a GPU.
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
  o.table.init_capacity = 1024;
  o.table.max_capacity = 1 << 16;
  o.table.score_policy = policy;
  o.table.initializer.kind = InitializerKind::kUniform;
  o.table.initializer.seed = seed;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.optimizer.learning_rate = 0.05f;
  return o;
}

// One table's batch on the host.
struct HostBatch {
  std::vector<K> keys;
  std::vector<int64_t> offsets{0};
  std::vector<float> weights;
};

class EmbeddingCollectionTest : public dynemb::testing::BackendTest {};

TEST_P(EmbeddingCollectionTest, MatchesOneEmbeddingPerTable) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed; replay with DYNEMB_TEST_SEED
  std::mt19937_64& rng = test_rng.engine();
  const uint32_t dim = 8 + 4 * static_cast<uint32_t>(rng() % 3);
  const size_t num_tables = 2 + rng() % 4;
  const bool weighted = rng() % 2 == 0;
  const PoolingMode mode = rng() % 2 == 0 ? PoolingMode::kSum : PoolingMode::kMean;
  std::vector<EmbeddingOptions> options;
  std::vector<std::unique_ptr<Embedding<K>>> reference;
  for (size_t t = 0; t < num_tables; ++t) {
    options.push_back(
        table_options(dim, rng(), t % 2 == 0 ? ScorePolicy::kStep : ScorePolicy::kLfu));
    reference.push_back(std::make_unique<Embedding<K>>(backend, options.back()));
  }
  EmbeddingCollection<K> collection(backend, options);
  ASSERT_EQ(collection.row_dim(), reference[0]->row_dim());

  std::vector<std::set<K>> seen(num_tables);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 12; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // Keys widen as the run goes on (8 bits, then 20, then 40): the collection re-combines.
    const int key_bits = step < 4 ? 8 : (step < 8 ? 20 : 40);
    std::vector<HostBatch> host(num_tables);
    for (size_t t = 0; t < num_tables; ++t) {
      // Some steps leave a table without ids, or without bags.
      const size_t bags = (step + t) % 7 == 3 ? 0 : 1 + rng() % 40;
      for (size_t b = 0; b < bags; ++b) {
        const size_t len = (step + t) % 5 == 2 ? 0 : rng() % 6;
        for (size_t j = 0; j < len; ++j) {
          // Half the ids on a few hot keys, so rows repeat within and across bags.
          const K key = rng() % 2 == 0 ? static_cast<K>(rng() % 8)
                                       : static_cast<K>(rng() & ((uint64_t{1} << key_bits) - 1));
          host[t].keys.push_back(key);
          host[t].weights.push_back(normal(rng));
          seen[t].insert(key);
        }
        host[t].offsets.push_back(static_cast<int64_t>(host[t].keys.size()));
      }
      if (bags == 0) host[t].offsets.clear();
    }
    size_t total_bags = 0;
    for (const auto& h : host) total_bags += h.offsets.empty() ? 0 : h.offsets.size() - 1;

    std::vector<BackendBuffer<K>> keys;
    std::vector<BackendBuffer<int64_t>> offsets;
    std::vector<BackendBuffer<float>> weights;
    std::vector<EmbeddingBatch<K>> batches;
    for (size_t t = 0; t < num_tables; ++t) {
      keys.push_back(upload(backend, host[t].keys));
      offsets.push_back(upload(backend, host[t].offsets));
      weights.push_back(upload(backend, host[t].weights));
      const size_t bags = host[t].offsets.empty() ? 0 : host[t].offsets.size() - 1;
      batches.push_back({keys[t].data(), host[t].keys.size(),
                         bags == 0 ? nullptr : offsets[t].data(), bags,
                         weighted ? weights[t].data() : nullptr, mode});
    }
    std::vector<float> grad(total_bags * dim);
    for (auto& g : grad) g = normal(rng);
    auto grad_buffer = upload(backend, grad);
    BackendBuffer<float> out(backend, total_bags * dim + 1);
    BackendBuffer<float> ref_out(backend, total_bags * dim + 1);

    collection.forward(batches, out.data(), dim, true);
    collection.backward(grad_buffer.data(), dim);
    size_t first = 0;
    for (size_t t = 0; t < num_tables; ++t) {
      reference[t]->forward(batches[t], ref_out.data() + first * dim, dim, true);
      reference[t]->backward(grad_buffer.data() + first * dim, dim);
      first += batches[t].num_bags;
    }
    backend_synchronize(backend);
    EXPECT_EQ(download(out, total_bags * dim), download(ref_out, total_bags * dim));

    const EmbeddingCollectionStats stats = collection.stats();
    size_t expired_ref = 0;
    for (size_t t = 0; t < num_tables; ++t) {
      SCOPED_TRACE("table " + std::to_string(t));
      const std::vector<K> all(seen[t].begin(), seen[t].end());
      const Contents got = contents(backend, collection.table(t), all);
      const Contents want = contents(backend, reference[t]->table(), all);
      EXPECT_EQ(got.found, want.found);
      EXPECT_EQ(got.rows, want.rows);
      EXPECT_EQ(got.scores, want.scores);
      const EmbeddingStats ref = reference[t]->stats();
      EXPECT_EQ(stats.tables[t].lookups, ref.lookups);
      EXPECT_EQ(stats.tables[t].unique_lookups, ref.unique_lookups);
      EXPECT_EQ(stats.tables[t].rows_created, ref.rows_created);
      EXPECT_EQ(collection.table(t).size(), reference[t]->table().size());
      EXPECT_EQ(stats.tables[t].table.rehashes, ref.table.rehashes);
      expired_ref += reference[t]->end_step();
    }
    EXPECT_EQ(collection.end_step(), expired_ref);
  }

  // Evaluation reads the eval initializer (zeros) for unseen keys and counts them per table.
  std::vector<K> fresh_keys{(K{1} << 41) + 5, 3, (K{1} << 41) + 9};
  std::vector<int64_t> fresh_offsets{0, 3};
  auto fk = upload(backend, fresh_keys);
  auto fo = upload(backend, fresh_offsets);
  std::vector<EmbeddingBatch<K>> eval(num_tables, EmbeddingBatch<K>{});
  eval.back() = {fk.data(), 3, fo.data(), 1, nullptr, PoolingMode::kSum};
  for (size_t t = 0; t + 1 < num_tables; ++t) eval[t].mode = PoolingMode::kSum;
  BackendBuffer<float> eval_out(backend, dim + 1);
  BackendBuffer<float> eval_ref(backend, dim + 1);
  collection.forward(eval, eval_out.data(), dim, false);
  reference.back()->forward(eval.back(), eval_ref.data(), dim, false);
  backend_synchronize(backend);
  EXPECT_EQ(download(eval_out, dim), download(eval_ref, dim));
  EXPECT_EQ(collection.stats().tables.back().eval_misses, reference.back()->stats().eval_misses);
  EXPECT_GE(collection.stats().tables.back().eval_misses, 2u);
}

TEST_P(EmbeddingCollectionTest, BadInputThrowsAndChangesNoTable) {
  const Backend backend = GetParam();
  std::vector<EmbeddingOptions> options{table_options(8, 1, ScorePolicy::kStep),
                                        table_options(8, 2, ScorePolicy::kStep),
                                        table_options(8, 3, ScorePolicy::kStep)};
  EmbeddingCollection<K> collection(backend, options);
  const std::vector<K> keys{1, 2, 3, 4};
  const std::vector<int64_t> offsets{0, 2, 4};
  const std::vector<int64_t> short_offsets{0, 2, 3};
  auto k = upload(backend, keys);
  auto o = upload(backend, offsets);
  auto so = upload(backend, short_offsets);
  const std::vector<K> wide{1, static_cast<K>(uint64_t{1} << 62), 3, 4};
  auto w = upload(backend, wide);
  BackendBuffer<float> out(backend, 6 * 8);
  const EmbeddingBatch<K> good{k.data(), 4, o.data(), 2, nullptr, PoolingMode::kSum};
  auto expect_throw = [&](std::vector<EmbeddingBatch<K>> batches, const std::string& needle) {
    try {
      collection.forward(batches, out.data(), 8, true);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (size_t t = 0; t < 3; ++t) EXPECT_EQ(collection.table(t).size(), 0u) << needle;
  };
  expect_throw({good, good}, "one batch per table");
  EmbeddingBatch<K> mean = good;
  mean.mode = PoolingMode::kMean;
  expect_throw({good, mean, good}, "batches[1].mode");
  EmbeddingBatch<K> short_bags = good;
  short_bags.offsets = so.data();
  expect_throw({good, good, short_bags}, "batches[2].offsets");
  EmbeddingBatch<K> too_wide = good;
  too_wide.keys = w.data();
  expect_throw({good, too_wide, good}, "must fit in 62 bits");

  // The same batches, good, then go through.
  collection.forward(std::vector<EmbeddingBatch<K>>{good, good, good}, out.data(), 8, true);
  backend_synchronize(backend);
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(collection.table(t).size(), 4u);
}

TEST_P(EmbeddingCollectionTest, NonfiniteGradientsAreRefusedOrCounted) {
  const Backend backend = GetParam();
  for (const SafeCheck check : {SafeCheck::kError, SafeCheck::kIgnore}) {
    SCOPED_TRACE(to_string(check));
    std::vector<EmbeddingOptions> options{table_options(4, 7, ScorePolicy::kStep),
                                          table_options(4, 8, ScorePolicy::kStep)};
    for (auto& o : options) {
      o.gradient_check = check;
      o.optimizer.kind = OptimizerKind::kSgd;
    }
    EmbeddingCollection<K> collection(backend, options);
    const std::vector<K> keys{10, 11, 12};
    const std::vector<int64_t> offsets{0, 1, 3};
    auto k = upload(backend, keys);
    auto o = upload(backend, offsets);
    const EmbeddingBatch<K> batch{k.data(), 3, o.data(), 2, nullptr, PoolingMode::kSum};
    BackendBuffer<float> out(backend, 4 * 4);
    collection.forward(std::vector<EmbeddingBatch<K>>{batch, batch}, out.data(), 4, true);
    backend_synchronize(backend);
    const std::vector<K> probe{10, 11, 12};
    const Contents before = contents(backend, collection.table(1), probe);
    // Bag 3 (table 1's second bag: keys 11 and 12) gets a NaN.
    std::vector<float> grad(4 * 4, 1.0f);
    grad[3 * 4 + 2] = std::nanf("");
    auto g = upload(backend, grad);
    if (check == SafeCheck::kError) {
      EXPECT_THROW(collection.backward(g.data(), 4), InvalidArgument);
      EXPECT_EQ(contents(backend, collection.table(1), probe).rows, before.rows);
      EXPECT_EQ(collection.stats().nonfinite_gradients, 2u);
    } else {
      collection.backward(g.data(), 4);
      backend_synchronize(backend);
      const Contents after = contents(backend, collection.table(1), probe);
      const uint32_t d = collection.table(1).dim();
      // Key 10 stepped by SGD (gradient 1 each element), 11 and 12 skipped.
      for (uint32_t j = 0; j < 4; ++j) {
        EXPECT_FLOAT_EQ(after.rows[j], before.rows[j] - options[1].optimizer.learning_rate);
        EXPECT_EQ(after.rows[d + j], before.rows[d + j]);
        EXPECT_EQ(after.rows[2 * d + j], before.rows[2 * d + j]);
      }
      EXPECT_EQ(collection.stats().nonfinite_gradients, 2u);
    }
  }
}

TEST(EmbeddingCollectionOptions, TablesMustShareTheRowLayout) {
  auto expect_throw = [](std::vector<EmbeddingOptions> options, const std::string& needle) {
    try {
      EmbeddingCollection<K> c(Backend::kCpu, options);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const EmbeddingOptions a = table_options(8, 1, ScorePolicy::kStep);
  EmbeddingOptions b = a;
  b.dim = 16;
  expect_throw({a, b}, "tables[1].dim");
  b = a;
  b.optimizer.learning_rate = 0.5f;
  expect_throw({a, a, b}, "tables[2].optimizer");
  b = a;
  b.admit_threshold = 3;
  expect_throw({a, b}, "tables[1].admit_threshold");
  b = a;
  b.eval_initializer.value = 1.0f;
  expect_throw({a, b}, "tables[1].eval_initializer");
  expect_throw({}, "at least one table");
  // Capacities, scores and seeds may differ.
  b = a;
  b.table.max_capacity = 1 << 10;
  b.table.score_policy = ScorePolicy::kLfu;
  b.table.initializer.seed = 99;
  EXPECT_NO_THROW((EmbeddingCollection<K>(Backend::kCpu, {a, b})));
}

INSTANTIATE_TEST_SUITE_P(Backends, EmbeddingCollectionTest, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

// Training on a caching table gives the same rows as training on one table large enough to hold
// everything: an Embedding (and an EmbeddingCollection) whose tables are CachedTables with a
// small fast tier over a Storage, against the same model on plain tables, step by step.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding_collection.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "storage/storage_kinds.hpp"

namespace dynemb::testing {
namespace {

using K = int64_t;
using storage::CachedTable;

EmbeddingOptions training_options(OptimizerKind kind) {
  EmbeddingOptions o;
  o.dim = 8;
  o.table.init_capacity = 1 << 14;
  o.table.max_capacity = 1 << 14;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.initializer.kind = InitializerKind::kNormal;
  o.table.initializer.stddev = 0.1f;
  o.table.initializer.seed = 5;
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = 0.05f;
  o.optimizer.eps = 1e-6f;
  return o;
}

struct HostBatch {
  std::vector<K> keys;
  std::vector<int64_t> offsets{0};
};

// Skewed keys in bags of 0-6 (a few hot keys, a long tail over 10K keys).
HostBatch draw_batch(TestRng& rng, size_t bags) {
  HostBatch b;
  for (size_t i = 0; i < bags; ++i) {
    const uint64_t len = rng.uniform(0, 6);
    for (uint64_t j = 0; j < len; ++j) {
      const double u = static_cast<double>(rng.uniform(0, 1u << 20)) / (1u << 20);
      b.keys.push_back(static_cast<K>(std::pow(u, 2.0) * 10000.0));
    }
    b.offsets.push_back(static_cast<int64_t>(b.keys.size()));
  }
  return b;
}

// A batch in a backend's memory.
struct DeviceBatch {
  BackendBuffer<K> keys;
  BackendBuffer<int64_t> offsets;
  DeviceBatch(Backend backend, const HostBatch& b)
      : keys(backend, std::max<size_t>(b.keys.size(), 1)), offsets(backend, b.offsets.size()) {
    keys.upload(b.keys.data(), b.keys.size());
    offsets.upload(b.offsets.data(), b.offsets.size());
  }
  EmbeddingBatch<K> view(const HostBatch& b) const {
    return {keys.data(),          b.keys.size(), offsets.data(),
            b.offsets.size() - 1, nullptr,       PoolingMode::kSum};
  }
};

// Every row of `big` equals the caching table's row of the same key, and nothing more is stored.
void expect_same_rows(Table<K>& big, Table<K>& cached) {
  std::map<K, std::vector<float>> want;
  big.for_each([&](K key, std::span<const float> row, uint64_t) {
    want[key].assign(row.begin(), row.end());
  });
  size_t seen = 0;
  cached.for_each([&](K key, std::span<const float> row, uint64_t) {
    ++seen;
    const auto it = want.find(key);
    ASSERT_NE(it, want.end()) << "key " << key;
    for (size_t c = 0; c < row.size(); ++c) ASSERT_EQ(row[c], it->second[c]) << "key " << key;
  });
  EXPECT_EQ(seen, want.size());
}

class CachedTraining : public BackendTest {};

TEST_P(CachedTraining, EmbeddingOnACachingTableMatchesOneBigTable) {
  const Backend backend = GetParam();
  TestRng rng;
  // Prefetch: none; the next batch read below on a host thread before the step
  // (prefetch_async); the next batch moved up (and its new keys created) between the step's
  // forward and backward, while the step's rows are in use (prefetch).
  // prefetch_step: the same, and the step's lookup then runs without a host synchronization;
  // over a private store, staged on the device while the new keys are stored nowhere.
  enum class Prefetch { kNone, kAsync, kAfterStep, kStep, kStepPrivate };
  for (const auto [kind, prefetch] : {std::pair{OptimizerKind::kAdam, Prefetch::kNone},
                                      std::pair{OptimizerKind::kAdaGrad, Prefetch::kNone},
                                      std::pair{OptimizerKind::kAdam, Prefetch::kAsync},
                                      std::pair{OptimizerKind::kAdam, Prefetch::kAfterStep},
                                      std::pair{OptimizerKind::kAdam, Prefetch::kStep},
                                      std::pair{OptimizerKind::kAdam, Prefetch::kStepPrivate}}) {
    SCOPED_TRACE(std::to_string(static_cast<int>(kind)) + " prefetch mode " +
                 std::to_string(static_cast<int>(prefetch)));
    const EmbeddingOptions o = training_options(kind);
    Embedding<K> big(backend, o);
    HostKind host;
    CachedTable<K>* cached = nullptr;
    Embedding<K> small(backend, o, [&](Backend b, const TableOptions& t) {
      TableOptions fast = t;
      fast.init_capacity = fast.max_capacity = 1024;  // ~10% of the 10K keys
      if (prefetch == Prefetch::kAfterStep || prefetch == Prefetch::kStep ||
          prefetch == Prefetch::kStepPrivate) {
        // Small buckets, so that a step's keys and the next batch's fill some bucket whole: a
        // prefetch that evicted a row the step holds by address would change the results.
        fast.init_capacity = fast.max_capacity = 256;
        fast.bucket_capacity = 32;
      }
      fast.max_load_factor = 1.0;
      auto table = std::make_unique<CachedTable<K>>(
          b, fast, host.make(t.dim),
          storage::CachingOptions{/*private_store=*/prefetch == Prefetch::kStepPrivate, 27,
                                  /*stage_prefetch_on_device=*/prefetch == Prefetch::kStepPrivate});
      cached = table.get();
      return table;
    });
    ASSERT_NE(cached, nullptr);
    const bool step_mode = prefetch == Prefetch::kStep || prefetch == Prefetch::kStepPrivate;
    const bool held_mode = prefetch == Prefetch::kAfterStep || step_mode;
    const size_t bags = held_mode ? 24 : 48;
    std::vector<float> out_a(bags * o.dim), out_b(bags * o.dim), grad(bags * o.dim);
    BackendBuffer<float> dout(backend, bags * o.dim), dgrad(backend, bags * o.dim);
    HostBatch next = draw_batch(rng, bags);
    const int steps = held_mode ? 200 : 60;
    for (int step = 0; step < steps; ++step) {
      const HostBatch hb = next;
      next = draw_batch(rng, bags);
      const DeviceBatch db(backend, hb);
      const DeviceBatch dn(backend, next);
      if (prefetch == Prefetch::kAsync) {  // the next batch's rows are read below meanwhile
        cached->prefetch_async(next.keys.size(), dn.keys.data());
      }
      for (float& g : grad) g = static_cast<float>(rng.uniform(0, 2000)) / 1000.0f - 1.0f;
      dgrad.upload(grad.data(), grad.size());
      big.forward(db.view(hb), dout.data(), o.dim, true);
      dout.download(out_a.data(), out_a.size());
      big.backward(dgrad.data(), o.dim);
      big.end_step();
      small.forward(db.view(hb), dout.data(), o.dim, true);
      dout.download(out_b.data(), out_b.size());
      // Between forward and backward: the step's rows, found by address, must stay put.
      // Keys stored nowhere get their rows there too (create), as the next forward would.
      // (Not after the last step: its rows would be created for a batch never trained.)
      if (prefetch == Prefetch::kAfterStep && step + 1 < steps) {
        cached->prefetch(next.keys.size(), dn.keys.data(), nullptr, true);
      }
      if (step_mode && step + 1 < steps) {
        cached->prefetch_step(next.keys.size(), dn.keys.data());
      }
      small.backward(dgrad.data(), o.dim);
      small.end_step();
      ASSERT_EQ(out_a, out_b) << "step " << step;
    }
    expect_same_rows(big.table(), small.table());
    // Rows created count the same (a prefetch's new rows count at the forward that uses them).
    EXPECT_EQ(small.stats().rows_created, big.stats().rows_created);
    const storage::CachingStats s = cached->caching_stats();
    EXPECT_GT(s.evictions_written, 0u) << "the fast tier never overflowed: the test shows nothing";
    EXPECT_GT(s.lower_hits, 0u);
    EXPECT_EQ(s.batch_evicted, 0u);
    if (prefetch != Prefetch::kNone) EXPECT_GT(s.prefetched, 0u);
    EXPECT_EQ(s.unserved, 0u);
    // Most steps' lookups ran without synchronizing (not the first, nor after a refusal).
    if (step_mode) EXPECT_GT(s.unsynced_calls, 100u);
    if (prefetch == Prefetch::kStepPrivate) {
      EXPECT_GT(s.staged_prefetches, s.staged_fallbacks) << "none staged on the device";
    } else {
      EXPECT_EQ(s.staged_prefetches, 0u);
    }
    // Evaluation (rows by address: rows found below move up, nothing is created) pools the same.
    const HostBatch hb = draw_batch(rng, bags);
    const DeviceBatch db(backend, hb);
    big.forward(db.view(hb), dout.data(), o.dim, false);
    dout.download(out_a.data(), out_a.size());
    small.forward(db.view(hb), dout.data(), o.dim, false);
    dout.download(out_b.data(), out_b.size());
    EXPECT_EQ(out_a, out_b);
  }
}

TEST_P(CachedTraining, CollectionOnCachingTablesMatchesBigTables) {
  const Backend backend = GetParam();
  TestRng rng;
  const std::vector<EmbeddingOptions> o(2, training_options(OptimizerKind::kAdam));
  EmbeddingCollection<K> big(backend, o);
  MapKind maps;
  EmbeddingCollection<K> small(backend, o, [&](Backend b, const TableOptions& t) {
    TableOptions fast = t;
    fast.init_capacity = fast.max_capacity = 1024;
    fast.max_load_factor = 1.0;
    return std::make_unique<CachedTable<K>>(b, fast, maps.make(t.dim));
  });
  const uint32_t dim = o[0].dim;
  const size_t bags = 32;
  std::vector<float> out_a(2 * bags * dim), out_b(2 * bags * dim), grad(2 * bags * dim);
  BackendBuffer<float> dout(backend, out_a.size()), dgrad(backend, grad.size());
  for (int step = 0; step < 40; ++step) {
    const HostBatch h0 = draw_batch(rng, bags), h1 = draw_batch(rng, bags);
    const DeviceBatch d0(backend, h0), d1(backend, h1);
    const std::vector<EmbeddingBatch<K>> batches{d0.view(h0), d1.view(h1)};
    for (float& g : grad) g = static_cast<float>(rng.uniform(0, 2000)) / 1000.0f - 1.0f;
    dgrad.upload(grad.data(), grad.size());
    big.forward(batches, dout.data(), dim, true);
    dout.download(out_a.data(), out_a.size());
    big.backward(dgrad.data(), dim);
    big.end_step();
    small.forward(batches, dout.data(), dim, true);
    dout.download(out_b.data(), out_b.size());
    small.backward(dgrad.data(), dim);
    small.end_step();
    ASSERT_EQ(out_a, out_b) << "step " << step;
  }
  for (size_t t = 0; t < 2; ++t) {
    expect_same_rows(big.table(t), small.table(t));
    auto* cached = dynamic_cast<CachedTable<K>*>(&small.table(t));
    ASSERT_NE(cached, nullptr);
    EXPECT_GT(cached->caching_stats().evictions_written, 0u) << "table " << t;
    EXPECT_GT(cached->caching_stats().lower_hits, 0u) << "table " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CachedTraining, all_backends(), backend_name);

}  // namespace
}  // namespace dynemb::testing

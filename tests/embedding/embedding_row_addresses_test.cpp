// Training on the table's rows in place (find_or_insert_pointers) with the table at max
// capacity: keys are refused and evicted (some by a later key of the same batch) every step.
// Each step is checked against a model built from the table before the step and the keys it
// holds after: a key with a row pools its old row (or its initializer row when new), a key
// without one pools the eval initializer (zeros) and gets no update; rows outside the batch
// do not change; each touched row's LFU score goes up by exactly one; rows_created counts the
// new keys that kept a row. CPU, and CUDA with a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/backend_test.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

using ops_test::upload;

using K = int64_t;

struct Stored {
  std::vector<float> row;
  uint64_t score = 0;
};

// What the table holds for `keys` (absent keys are left out).
std::map<K, Stored> snapshot(Embedding<K>& emb, const std::set<K>& key_set) {
  const Backend backend = emb.backend();
  const std::vector<K> keys(key_set.begin(), key_set.end());
  const uint32_t row_dim = emb.row_dim();
  auto k = upload(backend, keys);
  BackendBuffer<float> rows(backend, keys.size() * row_dim + 1);
  BackendBuffer<uint8_t> found(backend, keys.size() + 1);
  BackendBuffer<uint64_t> scores(backend, keys.size() + 1);
  emb.table().find(keys.size(), k.data(), rows.data(), reinterpret_cast<bool*>(found.data()),
                   scores.data(), nullptr);
  backend_synchronize(backend);
  std::vector<float> h_rows(keys.size() * row_dim);
  std::vector<uint8_t> h_found(keys.size());
  std::vector<uint64_t> h_scores(keys.size());
  rows.download(h_rows.data(), h_rows.size());
  found.download(h_found.data(), h_found.size());
  scores.download(h_scores.data(), h_scores.size());
  std::map<K, Stored> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!h_found[i]) continue;
    out[keys[i]] = {{h_rows.begin() + i * row_dim, h_rows.begin() + (i + 1) * row_dim},
                    h_scores[i]};
  }
  return out;
}

class EmbeddingRowAddresses : public dynemb::testing::BackendTest {};

TEST_P(EmbeddingRowAddresses, FullTableRefusesAndEvictsDuringTraining) {
  const Backend backend = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const uint32_t dim = 8;
  EmbeddingOptions o;
  o.dim = dim;
  o.table.bucket_capacity = 16;
  o.table.init_capacity = o.table.max_capacity = 32;  // two buckets, no growth
  o.table.score_policy = ScorePolicy::kLfu;
  o.table.safe_check = SafeCheck::kIgnore;
  o.table.initializer.kind = InitializerKind::kUniform;
  o.table.initializer.seed = seed;
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 0.5f;
  Embedding<K> emb(backend, o);
  ASSERT_EQ(emb.row_dim(), dim);

  std::set<K> seen;
  uint64_t created = 0;
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 40; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // 100 keys on 32 slots, half of the ids on 20 hot keys: new keys evict low-count keys (also
    // ones inserted earlier in the same batch) and, once a bucket holds only keys seen twice or
    // more, are refused.
    // Steps 30 and 31 touch every stored key (all counts >= 2 then), so the fresh keys of the
    // later steps meet full buckets of higher counts and are refused.
    std::vector<K> keys;
    std::vector<int64_t> offsets{0};
    const size_t bags = 12;
    std::vector<K> stored;
    for (const auto& [key, row] : snapshot(emb, seen)) stored.push_back(key);
    for (size_t b = 0; b < bags; ++b) {
      if (step == 30 || step == 31) {
        for (size_t i = b; i < stored.size(); i += bags) keys.push_back(stored[i]);
      } else {
        const int len = static_cast<int>(rng() % 5);
        for (int j = 0; j < len; ++j) {
          if (step > 31) {
            keys.push_back(u(rng) < 0.5 ? stored[rng() % stored.size()]
                                        : static_cast<K>(5000 + rng() % 1000));
          } else {
            keys.push_back(u(rng) < 0.5 ? static_cast<K>(rng() % 20)
                                        : static_cast<K>(1000 + rng() % 80));
          }
        }
      }
      offsets.push_back(static_cast<int64_t>(keys.size()));
    }
    std::set<K> batch_keys(keys.begin(), keys.end());
    seen.insert(keys.begin(), keys.end());
    const auto before = snapshot(emb, seen);

    std::vector<float> grad(bags * dim);
    for (auto& g : grad) g = normal(rng);
    auto k = upload(backend, keys);
    auto off = upload(backend, offsets);
    auto gr = upload(backend, grad);
    BackendBuffer<float> out(backend, bags * dim + 1);
    const EmbeddingBatch<K> batch{k.data(), keys.size(), off.data(),
                                  bags,     nullptr,     PoolingMode::kSum};
    emb.forward(batch, out.data(), dim, true);
    emb.backward(gr.data(), dim);
    backend_synchronize(backend);
    std::vector<float> pooled(bags * dim);
    out.download(pooled.data(), pooled.size());
    const auto after = snapshot(emb, seen);

    // A batch key that holds a row after the step kept its old row, or got a fresh one: it was
    // new, or (the contract allows it) an earlier new key of the same batch evicted it and it
    // was inserted again; LFU tells which (a fresh row has one touch, a kept one more).
    auto fresh = [&](K key) {
      const auto it = before.find(key);
      return it == before.end() || after.at(key).score == 1;
    };
    // Keys with a row after the step read their start row, the others zeros.
    auto start_row = [&](K key) {
      std::vector<double> r(dim, 0.0);
      if (!after.count(key)) return r;
      const bool is_fresh = fresh(key);
      for (uint32_t j = 0; j < dim; ++j) {
        r[j] =
            is_fresh ? initial_value(o.table.initializer, key_bits(key), j) : before.at(key).row[j];
      }
      return r;
    };
    std::map<K, std::vector<double>> key_grad;
    for (size_t b = 0; b < bags; ++b) {
      for (uint32_t j = 0; j < dim; ++j) {
        double want = 0;
        for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) want += start_row(keys[i])[j];
        ASSERT_NEAR(pooled[b * dim + j], want, 1e-5) << "bag " << b << " element " << j;
      }
      for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) {
        auto& g = key_grad[keys[i]];
        g.resize(dim, 0.0);
        for (uint32_t j = 0; j < dim; ++j) g[j] += grad[b * dim + j];
      }
    }
    uint64_t created_now = 0;
    for (const auto& [key, stored] : after) {
      const auto it = before.find(key);
      if (!batch_keys.count(key)) {
        // Outside the batch: untouched.
        ASSERT_NE(it, before.end()) << "key " << key << " appeared without being looked up";
        EXPECT_EQ(stored.row, it->second.row) << "key " << key;
        EXPECT_EQ(stored.score, it->second.score) << "key " << key;
        continue;
      }
      created_now += fresh(key);
      // One LFU touch per step (the forward's; no write-back touch).
      EXPECT_EQ(stored.score, (fresh(key) ? 0 : it->second.score) + 1) << "key " << key;
      const auto start = start_row(key);
      for (uint32_t j = 0; j < dim; ++j) {
        const double want = start[j] - o.optimizer.learning_rate * key_grad[key][j];
        EXPECT_NEAR(stored.row[j], want, 1e-5) << "key " << key << " element " << j;
      }
    }
    created += created_now;
    const EmbeddingStats stats = emb.stats();
    EXPECT_EQ(stats.rows_created, created);
    EXPECT_LE(emb.table().size(), 32u);
    emb.end_step();
  }
  const EmbeddingStats stats = emb.stats();
  EXPECT_GT(stats.table.evictions, 0u);
  EXPECT_GT(stats.table.refused, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, EmbeddingRowAddresses, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

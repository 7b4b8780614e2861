// The cache against the reference LRU model: exact contents of every set, exact query answers,
// after every call of a long random sequence (single-threaded).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "cache/cache_harness.hpp"
#include "core/backend_test.hpp"
#include "core/test_random.hpp"

namespace dynemb::cache::testing {
namespace {

using dynemb::testing::BackendTest;
using dynemb::testing::TestRng;

// Draws a replace batch. On the CPU any keys; on CUDA, whose batch keys are placed in parallel,
// keys whose candidate-set pairs do not overlap (repeats of one key allowed), so the outcome is
// the sequential one the model computes.
template <class K>
std::vector<K> draw_replace_batch(TestRng& rng, Backend backend, size_t n, uint64_t universe,
                                  uint64_t num_sets, K offset) {
  std::vector<K> keys;
  std::set<uint64_t> used_sets;
  std::vector<K> placed;
  for (size_t tries = 0; keys.size() < n && tries < 20 * n; ++tries) {
    const K key = static_cast<K>(offset + static_cast<K>(rng.uniform(0, universe - 1)));
    if (backend == Backend::kCuda) {
      const bool repeat = std::find(placed.begin(), placed.end(), key) != placed.end();
      const CandidateSets c = candidate_sets(cache_key_bits(key), num_sets);
      if (!repeat && (used_sets.count(c.first) || used_sets.count(c.second))) continue;
      used_sets.insert(c.first);
      used_sets.insert(c.second);
      placed.push_back(key);
    }
    keys.push_back(key);
  }
  return keys;
}

template <class K>
void run_model_sequence(Backend backend, K offset) {
  TestRng rng;
  CacheOptions<K> options;
  options.dim = static_cast<uint32_t>(rng.uniform(1, 40));
  options.ways = 32;
  options.capacity_rows = rng.uniform(100, 400);   // 4 .. 15 sets
  options.empty_key = static_cast<K>(offset - 1);  // a user-chosen sentinel below the keys
  CacheHarness<K> cache(backend, options);
  const uint64_t sets = cache.cache().num_sets();
  ReferenceLru<K> model(sets, options.ways, options.dim);
  const uint64_t universe = sets * options.ways * 3;
  int version = 0;

  for (int step = 0; step < 300; ++step) {
    const uint64_t op = rng.uniform(0, 9);
    SCOPED_TRACE("step " + std::to_string(step) + " op " + std::to_string(op));
    if (op < 4) {  // query, with repeats
      std::vector<K> keys(rng.uniform(0, 200));
      for (K& k : keys) k = static_cast<K>(offset + static_cast<K>(rng.uniform(0, universe - 1)));
      const QueryOutput<K> got = cache.query(keys);
      const QueryOutput<K> want = model.query(keys);
      ASSERT_EQ(got.missing_keys, want.missing_keys);
      ASSERT_EQ(got.missing_positions, want.missing_positions);
      ASSERT_EQ(got.values, want.values);
    } else if (op < 8) {  // replace
      const std::vector<K> keys =
          draw_replace_batch<K>(rng, backend, rng.uniform(1, 150), universe, sets, offset);
      const std::vector<float> values = rows_of(keys, options.dim, ++version);
      cache.replace(keys, values);
      model.replace(keys, values);
    } else if (op == 8) {  // update, distinct keys
      std::set<K> distinct;
      for (size_t i = rng.uniform(0, 60); i > 0; --i) {
        distinct.insert(static_cast<K>(offset + static_cast<K>(rng.uniform(0, universe - 1))));
      }
      const std::vector<K> keys(distinct.begin(), distinct.end());
      const std::vector<float> values = rows_of(keys, options.dim, ++version);
      cache.update(keys, values);
      model.update(keys, values);
    } else {  // erase
      std::vector<K> keys(rng.uniform(0, 30));
      for (K& k : keys) k = static_cast<K>(offset + static_cast<K>(rng.uniform(0, universe - 1)));
      cache.erase(keys);
      model.erase(keys);
    }
    for (uint64_t s = 0; s < sets; ++s) {
      ASSERT_EQ(cache.dump(s, 1), model.set_contents(s)) << "set " << s;
    }
  }
  EXPECT_TRUE(cache.duplicate_keys().empty());
  EXPECT_EQ(cache.cache().stats().evicted, model.evicted());
  EXPECT_EQ(cache.cache().size(), model.contents().size());
}

class CacheModelTest : public BackendTest {};

TEST_P(CacheModelTest, Int64KeysMatchTheModel) {
  run_model_sequence<int64_t>(GetParam(), -1000);
}
TEST_P(CacheModelTest, Int32KeysMatchTheModel) {
  run_model_sequence<int32_t>(GetParam(), -50);
}
TEST_P(CacheModelTest, Uint64KeysMatchTheModel) {
  run_model_sequence<uint64_t>(GetParam(), 0xFFFFFFFF00000000ull);
}

INSTANTIATE_TEST_SUITE_P(Backends, CacheModelTest, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb::cache::testing

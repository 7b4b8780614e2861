// What a cache promises beyond the model sequence: a cache as large as the key set holds all of
// it after one pass, repeated keys in a batch, preload, dump ranges, counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "cache/cache_harness.hpp"
#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::cache::testing {
namespace {

using dynemb::testing::BackendTest;
using dynemb::testing::TestRng;

class CacheBehaviourTest : public BackendTest {};

TEST_P(CacheBehaviourTest, CacheAsLargeAsTheKeySetHitsEverythingAfterOnePass) {
  TestRng rng;
  for (const uint32_t ways : {32u, 64u, 128u}) {
    const size_t n = rng.uniform(20000, 60000);
    CacheOptions<int64_t> options;
    options.dim = 8;
    options.ways = ways;
    options.capacity_rows = n;
    CacheHarness<int64_t> cache(GetParam(), options);
    const std::vector<int64_t> keys = distinct_keys(rng, n);
    // One pass in batches: query, then replace what missed.
    for (size_t begin = 0; begin < n; begin += 4096) {
      const std::vector<int64_t> batch(keys.begin() + begin,
                                       keys.begin() + std::min(n, begin + 4096));
      const QueryOutput<int64_t> got = cache.query(batch);
      ASSERT_EQ(got.missing_keys, batch);
      cache.replace(got.missing_keys, rows_of(got.missing_keys, options.dim));
    }
    EXPECT_EQ(cache.cache().stats().evicted, 0u) << "ways " << ways;
    const QueryOutput<int64_t> again = cache.query(keys);
    EXPECT_TRUE(again.missing_keys.empty())
        << again.missing_keys.size() << " of " << n << " missed, ways " << ways;
    EXPECT_EQ(again.values, rows_of(keys, options.dim));
    EXPECT_EQ(cache.cache().size(), n);
  }
}

TEST_P(CacheBehaviourTest, RepeatedKeysInOneBatchAreEachAnswered) {
  TestRng rng;
  CacheOptions<int64_t> options;
  options.dim = 16;
  options.capacity_rows = 4096;
  CacheHarness<int64_t> cache(GetParam(), options);
  const std::vector<int64_t> stored = distinct_keys(rng, 1000);
  cache.replace(stored, rows_of(stored, options.dim));
  // A batch where one hot key is half of all keys, others repeat, some are absent.
  std::vector<int64_t> batch;
  std::set<int64_t> absent;
  for (int i = 0; i < 20000; ++i) {
    if (rng.chance(0.5)) {
      batch.push_back(stored[0]);
    } else if (rng.chance(0.8)) {
      batch.push_back(stored[rng.uniform(0, stored.size() - 1)]);
    } else {
      const int64_t k = -static_cast<int64_t>(rng.uniform(2, 50));  // never stored
      batch.push_back(k);
      absent.insert(k);
    }
  }
  const QueryOutput<int64_t> got = cache.query(batch);
  std::vector<uint64_t> want_positions;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (absent.count(batch[i])) {
      want_positions.push_back(i);
      continue;
    }
    const std::vector<float> want = row_of(batch[i], options.dim);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got.values.begin() + i * options.dim))
        << "position " << i;
  }
  EXPECT_EQ(got.missing_positions, want_positions);
  for (size_t m = 0; m < got.missing_keys.size(); ++m) {
    EXPECT_EQ(got.missing_keys[m], batch[got.missing_positions[m]]);
  }
  const CacheStats stats = cache.cache().stats();
  EXPECT_EQ(stats.hits, batch.size() - want_positions.size());
  EXPECT_EQ(stats.misses, want_positions.size());

  // Replace with repeats: the last copy's row wins and the key is stored once.
  std::vector<int64_t> keys;
  std::vector<float> values;
  const int64_t fresh = -1000;
  for (int v = 1; v <= 50; ++v) {
    keys.push_back(fresh);
    const std::vector<float> r = row_of(fresh, options.dim, v);
    values.insert(values.end(), r.begin(), r.end());
    keys.push_back(stored[1]);
    const std::vector<float> s = row_of(stored[1], options.dim, v);
    values.insert(values.end(), s.begin(), s.end());
  }
  cache.replace(keys, values);
  const Contents<int64_t> contents = cache.dump_all();
  EXPECT_TRUE(cache.duplicate_keys().empty());
  EXPECT_EQ(contents.at(fresh), row_of(fresh, options.dim, 50));
  EXPECT_EQ(contents.at(stored[1]), row_of(stored[1], options.dim, 50));
  EXPECT_EQ(contents.size(), stored.size() + 1);
}

TEST_P(CacheBehaviourTest, UpdateTouchesOnlyStoredKeysAndEraseRemoves) {
  TestRng rng;
  CacheOptions<uint64_t> options;
  options.dim = 5;
  options.capacity_rows = 2000;
  CacheHarness<uint64_t> cache(GetParam(), options);
  std::vector<uint64_t> keys(1500);
  std::iota(keys.begin(), keys.end(), rng.uniform(0, 1ull << 40));
  cache.replace(keys, rows_of(keys, options.dim));
  std::vector<uint64_t> mixed(keys.begin(), keys.begin() + 700);
  for (uint64_t k = 0; k < 300; ++k) mixed.push_back(keys.back() + 1 + k);  // not stored
  cache.update(mixed, rows_of(mixed, options.dim, 9));
  Contents<uint64_t> contents = cache.dump_all();
  ASSERT_EQ(contents.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(contents.at(keys[i]), row_of(keys[i], options.dim, i < 700 ? 9 : 0));
  }
  cache.erase(mixed);
  contents = cache.dump_all();
  EXPECT_EQ(contents.size(), keys.size() - 700);
  EXPECT_EQ(contents.count(keys[0]), 0u);
  EXPECT_EQ(cache.cache().stats().erased, 700u);
  EXPECT_EQ(cache.cache().stats().refreshed, 700u);
}

TEST_P(CacheBehaviourTest, PreloadHoldsAWholeTableAndDumpRangesCoverIt) {
  TestRng rng;
  CacheOptions<int32_t> options;
  options.dim = 12;
  options.ways = 64;
  options.capacity_rows = rng.uniform(5000, 9000);
  options.empty_key = 0;
  CacheHarness<int32_t> cache(GetParam(), options);
  const size_t n = cache.cache().footprint().rows;  // the whole capacity
  std::vector<int32_t> keys(n);
  std::iota(keys.begin(), keys.end(), 1);
  std::shuffle(keys.begin(), keys.end(), rng.engine());
  EXPECT_EQ(cache.preload(keys, rows_of(keys, options.dim)), 0u);
  Contents<int32_t> by_ranges;
  const uint64_t sets = cache.cache().num_sets();
  for (uint64_t first = 0; first < sets; first += 7) {
    const Contents<int32_t> part = cache.dump(first, std::min<uint64_t>(7, sets - first));
    by_ranges.insert(part.begin(), part.end());
  }
  EXPECT_TRUE(cache.duplicate_keys().empty());
  ASSERT_EQ(by_ranges.size(), n);
  for (const int32_t k : keys) EXPECT_EQ(by_ranges.at(k), row_of(k, options.dim));
  EXPECT_TRUE(cache.query(keys).missing_keys.empty());
  // A second preload replaces the first.
  std::vector<int32_t> other(100);
  std::iota(other.begin(), other.end(), -100);
  cache.preload(other, rows_of(other, options.dim));
  EXPECT_EQ(cache.cache().size(), other.size());
}

// Rows exported from a table come in the order of the table's bucket hash; the cache's set hashes
// are independent of it, so a run of such rows still spreads over every set.
TEST_P(CacheBehaviourTest, PreloadOfRowsInTableBucketOrderFits) {
  TestRng rng;
  TableOptions table_options;
  table_options.dim = 1;
  table_options.init_capacity = 1 << 18;
  table_options.max_capacity = 1 << 18;
  auto table = make_table<int64_t>(Backend::kCpu, table_options);
  const std::vector<int64_t> stored = distinct_keys(rng, 100000);
  const std::vector<float> ones(stored.size(), 1.0f);
  table->insert_or_assign(stored.size(), stored.data(), ones.data());
  std::vector<int64_t> in_bucket_order(stored.size());
  std::vector<float> rows(stored.size());
  const size_t exported =
      table->export_batch(0, table->capacity(), in_bucket_order.data(), rows.data(), nullptr);
  ASSERT_EQ(exported, stored.size());
  CacheOptions<int64_t> options;
  options.dim = 4;
  options.capacity_rows = 20000;  // a fifth of the rows: the lowest-hash fifth of the table
  CacheHarness<int64_t> cache(GetParam(), options);
  const size_t n = cache.cache().footprint().rows;
  in_bucket_order.resize(n);
  EXPECT_EQ(cache.preload(in_bucket_order, rows_of(in_bucket_order, options.dim)), 0u);
  EXPECT_EQ(cache.cache().size(), n);
}

// Queries of every size class (the CUDA cache compacts misses inside its query kernel up to
// 131,072 keys, in tiles of 8 to 1,024 keys, and in a separate pass beyond): each answer against
// the set of stored keys, misses in batch order, hits and misses counted.
TEST_P(CacheBehaviourTest, QueriesOfEverySizeAnswerInBatchOrder) {
  TestRng rng;
  CacheOptions<int64_t> options;
  options.dim = 4;
  options.capacity_rows = 40000;
  CacheHarness<int64_t> cache(GetParam(), options);
  const std::vector<int64_t> pool = distinct_keys(rng, 80000);
  const std::vector<int64_t> stored(pool.begin(), pool.begin() + 30000);
  ASSERT_EQ(cache.preload(stored, rows_of(stored, options.dim)), 0u);
  const std::set<int64_t> present(stored.begin(), stored.end());
  uint64_t queried = 0, missed = 0;
  for (const size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{2051}, size_t{65541},
                         size_t{131072}, size_t{131073}, size_t{200000}}) {
    SCOPED_TRACE("batch of " + std::to_string(n));
    std::vector<int64_t> keys(n);
    for (int64_t& k : keys) k = pool[rng.uniform(0, pool.size() - 1)];  // repeats included
    const QueryOutput<int64_t> got = cache.query(keys);
    std::vector<int64_t> want_missing;
    std::vector<uint64_t> want_positions;
    std::vector<float> want_values(n * options.dim, -7.0f);
    for (size_t i = 0; i < n; ++i) {
      if (present.count(keys[i]) == 0) {
        want_missing.push_back(keys[i]);
        want_positions.push_back(i);
      } else {
        const std::vector<float> row = row_of(keys[i], options.dim);
        std::copy(row.begin(), row.end(), want_values.begin() + i * options.dim);
      }
    }
    ASSERT_EQ(got.missing_keys, want_missing);
    ASSERT_EQ(got.missing_positions, want_positions);
    ASSERT_EQ(got.values, want_values);
    queried += n;
    missed += want_missing.size();
  }
  const CacheStats stats = cache.cache().stats();
  EXPECT_EQ(stats.misses, missed);
  EXPECT_EQ(stats.hits, queried - missed);
}

TEST_P(CacheBehaviourTest, CapacityInBytesStaysWithinTheBudget) {
  CacheOptions<int64_t> options;
  options.dim = 32;
  options.capacity_bytes = 10'000'000;
  const CacheFootprint f = cache_footprint(GetParam(), options);
  EXPECT_LE(f.bytes, options.capacity_bytes);
  EXPECT_EQ(f.bytes_per_slot, 8u + 8u + 128u);
  EXPECT_GT(f.bytes + f.bytes_per_slot * options.ways + 64, options.capacity_bytes);
  CacheHarness<int64_t> cache(GetParam(), options);
  EXPECT_EQ(cache.cache().footprint().slots, f.slots);
  EXPECT_EQ(cache.cache().footprint().rows, static_cast<uint64_t>(f.slots * 0.9));
}

INSTANTIATE_TEST_SUITE_P(Backends, CacheBehaviourTest, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb::cache::testing

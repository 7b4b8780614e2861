// Eight threads query and replace one cache at once: every value a query returns is the row of
// its key, and the cache never holds a key twice.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "cache/cache_harness.hpp"
#include "core/backend_test.hpp"
#include "core/test_random.hpp"

namespace dynemb::cache::testing {
namespace {

using dynemb::testing::BackendTest;
using dynemb::testing::TestRng;

class CacheConcurrencyTest : public BackendTest {};

TEST_P(CacheConcurrencyTest, EightThreadsQueryAndReplace) {
  TestRng rng;
  constexpr int kThreads = 8;
  constexpr uint64_t kUniverse = 20000;
  CacheOptions<int64_t> options;
  options.dim = 24;
  options.capacity_rows = 3000;  // far below the universe: constant eviction
  CacheHarness<int64_t> shared(GetParam(), options);
  EmbeddingCache<int64_t>& cache = shared.cache();
  std::atomic<uint64_t> queried{0};
  std::atomic<uint64_t> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t, seed = rng.next()] {
      std::mt19937_64 engine(seed);
      CacheHarness<int64_t>* h = &shared;
      // Skewed keys: the square of a uniform draw favours small ids.
      auto draw = [&] {
        const double u = std::uniform_real_distribution<double>(0, 1)(engine);
        return static_cast<int64_t>(u * u * kUniverse);
      };
      for (int round = 0; round < 60; ++round) {
        std::vector<int64_t> keys(std::uniform_int_distribution<int>(1, 400)(engine));
        for (auto& k : keys) k = draw();
        const QueryOutput<int64_t> got = h->query(keys);
        queried += keys.size();
        size_t next_miss = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (next_miss < got.missing_positions.size() && got.missing_positions[next_miss] == i) {
            ++next_miss;
            continue;
          }
          const std::vector<float> want = row_of(keys[i], options.dim);
          if (!std::equal(want.begin(), want.end(), got.values.begin() + i * options.dim)) ++wrong;
        }
        if (next_miss != got.missing_positions.size()) ++wrong;
        h->replace(got.missing_keys, rows_of(got.missing_keys, options.dim));
        if (round % 10 == t % 10) {
          std::vector<int64_t> some(keys.begin(), keys.begin() + keys.size() / 4);
          h->update(some, rows_of(some, options.dim));
          if (t % 2 == 0) h->erase(some);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  const Contents<int64_t> contents = shared.dump_all();
  EXPECT_TRUE(shared.duplicate_keys().empty());
  for (const auto& [k, row] : contents) ASSERT_EQ(row, row_of(k, options.dim)) << "key " << k;
  EXPECT_LE(contents.size(), cache.footprint().slots);
  EXPECT_EQ(contents.size(), cache.size());
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.hits + stats.misses, queried.load());
  EXPECT_GT(stats.evicted, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, CacheConcurrencyTest, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb::cache::testing

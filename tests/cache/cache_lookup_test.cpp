// The lookup path: cache, then the miss source, then the fill for absent keys; fetched rows go
// into the cache per the hit-rate policy.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "cache/cache_harness.hpp"
#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/cache/cached_lookup.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::cache::testing {
namespace {

using dynemb::testing::BackendTest;
using dynemb::testing::TestRng;

// A source holding the even keys below `limit` (odd keys are absent), counting what it served.
class EvenKeysSource final : public MissSource<int64_t> {
 public:
  EvenKeysSource(uint32_t dim, int64_t limit) : dim_(dim), limit_(limit) {}
  uint32_t dim() const override { return dim_; }
  void fetch(size_t n, const int64_t* keys, float* rows, bool* founds) override {
    fetched_ += n;
    for (size_t i = 0; i < n; ++i) {
      founds[i] = keys[i] % 2 == 0 && keys[i] < limit_;
      if (founds[i]) {
        const std::vector<float> r = row_of(keys[i], dim_);
        std::copy(r.begin(), r.end(), rows + i * dim_);
      }
    }
  }
  size_t fetched() const { return fetched_; }

 private:
  uint32_t dim_;
  int64_t limit_;
  size_t fetched_ = 0;
};

class CacheLookupTest : public BackendTest {};

TEST_P(CacheLookupTest, FillsFromCacheThenSourceThenTheAbsentFill) {
  TestRng rng;
  CacheOptions<int64_t> options;
  options.dim = 20;
  options.capacity_rows = 2000;
  CacheHarness<int64_t> harness(GetParam(), options);
  EvenKeysSource source(options.dim, 4000);
  LookupOptions lookup_options;
  lookup_options.absent_fill = -3.5f;
  CachedLookup<int64_t> lookup(harness.cache(), source, lookup_options);
  size_t total_hits = 0;
  for (int round = 0; round < 20; ++round) {
    std::vector<int64_t> keys(rng.uniform(1, 3000));
    for (auto& k : keys) k = static_cast<int64_t>(rng.uniform(0, 5000));
    BackendBuffer<int64_t> d_keys(GetParam(), keys.size());
    d_keys.upload(keys.data(), keys.size());
    BackendBuffer<float> d_values(GetParam(), keys.size() * options.dim);
    const LookupResult r = lookup.lookup(keys.size(), d_keys.data(), d_values.data());
    backend_synchronize(GetParam());
    std::vector<float> values(keys.size() * options.dim);
    d_values.download(values.data(), values.size());
    size_t absent = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const bool known = keys[i] % 2 == 0 && keys[i] < 4000;
      absent += !known;
      const std::vector<float> want =
          known ? row_of(keys[i], options.dim) : std::vector<float>(options.dim, -3.5f);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), values.begin() + i * options.dim))
          << "round " << round << " position " << i << " key " << keys[i];
    }
    EXPECT_EQ(r.hits + r.fetched + r.absent, keys.size());
    EXPECT_EQ(r.absent, absent);  // absent keys are never cached, so every copy misses
    total_hits += r.hits;
  }
  EXPECT_GT(total_hits, 0u);
  // Only keys the source has were inserted.
  for (const auto& [k, row] : harness.dump_all()) {
    EXPECT_TRUE(k % 2 == 0 && k < 4000) << k;
    EXPECT_EQ(row, row_of(k, options.dim));
  }
}

TEST_P(CacheLookupTest, RepeatedMissesAreFetchedAndInsertedOnce) {
  CacheOptions<int64_t> options;
  options.dim = 8;
  options.capacity_rows = 100;
  CacheHarness<int64_t> harness(GetParam(), options);
  EvenKeysSource source(options.dim, 1000);
  CachedLookup<int64_t> lookup(harness.cache(), source);
  std::vector<int64_t> keys(3000, 42);
  for (size_t i = 0; i < keys.size(); i += 3) keys[i] = 7;  // absent from the source
  BackendBuffer<int64_t> d_keys(GetParam(), keys.size());
  d_keys.upload(keys.data(), keys.size());
  BackendBuffer<float> d_values(GetParam(), keys.size() * options.dim);
  const LookupResult r = lookup.lookup(keys.size(), d_keys.data(), d_values.data());
  backend_synchronize(GetParam());
  EXPECT_EQ(r.source_keys, 2u);
  EXPECT_EQ(source.fetched(), 2u);
  EXPECT_EQ(r.fetched, 2000u);
  EXPECT_EQ(r.absent, 1000u);
  std::vector<float> values(keys.size() * options.dim);
  d_values.download(values.data(), values.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> want =
        keys[i] == 42 ? row_of<int64_t>(42, options.dim) : std::vector<float>(options.dim, 0.0f);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), values.begin() + i * options.dim)) << i;
  }
  const Contents<int64_t> contents = harness.dump_all();
  ASSERT_EQ(contents.size(), 1u);
  EXPECT_EQ(contents.begin()->first, 42);
  EXPECT_EQ(harness.cache().stats().inserted, 1u);
  EXPECT_EQ(harness.cache().stats().refreshed, 0u);
}

TEST_P(CacheLookupTest, HitRateThresholdStopsInsertion) {
  CacheOptions<int64_t> options;
  options.dim = 4;
  options.capacity_rows = 100;
  CacheHarness<int64_t> harness(GetParam(), options);
  EvenKeysSource source(options.dim, 1000);
  LookupOptions never;
  never.replace_below_hit_rate = 0.0;
  CachedLookup<int64_t> lookup(harness.cache(), source, never);
  const std::vector<int64_t> keys = {2, 4, 6, 8};
  BackendBuffer<int64_t> d_keys(GetParam(), keys.size());
  d_keys.upload(keys.data(), keys.size());
  BackendBuffer<float> d_values(GetParam(), keys.size() * options.dim);
  const LookupResult r = lookup.lookup(keys.size(), d_keys.data(), d_values.data());
  EXPECT_FALSE(r.replaced);
  EXPECT_EQ(r.fetched, 4u);
  EXPECT_EQ(harness.cache().size(), 0u);
}

TEST_P(CacheLookupTest, SourceOfAnotherDimIsRefused) {
  CacheOptions<int64_t> options;
  options.dim = 16;
  options.capacity_rows = 100;
  CacheHarness<int64_t> harness(GetParam(), options);
  EvenKeysSource source(32, 10);
  try {
    CachedLookup<int64_t> lookup(harness.cache(), source);
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("source dim = 32"), std::string::npos) << m;
    EXPECT_NE(m.find("dim = 16"), std::string::npos) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CacheLookupTest, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb::cache::testing

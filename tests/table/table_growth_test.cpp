// Growth: doubling from init_capacity to max_capacity, no key lost, no eviction before max;
// reserve.
#include <gtest/gtest.h>

#include <bit>

#include "dynemb/core/error.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableGrowthTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableGrowthTest, AllTableConfigs, TableConfigNames);

// Checks that `capacity` is init_capacity times a power of two, within max_capacity.
void expect_doubling_of(const TableOptions& o, size_t capacity) {
  EXPECT_LE(capacity, o.max_capacity);
  EXPECT_EQ(capacity % o.init_capacity, 0u) << capacity;
  EXPECT_TRUE(std::has_single_bit(capacity / o.init_capacity)) << capacity;
}

TYPED_TEST(TableGrowthTest, GrowsFromInitToMaxWithoutLosingOrEvictingKeys) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o;
  o.dim = 3;
  o.init_capacity = 128;
  o.max_capacity = 128 << 7;
  // 128-slot buckets: at max capacity the 8,192 keys average 64 per bucket, and a bucket
  // overflowing (which the contract answers with an eviction) is ~8 sigma away. With 32-slot
  // buckets one of 512 buckets overflowed in ~2.5% of runs.
  o.bucket_capacity = 128;
  o.max_load_factor = 0.5;
  o.score_policy = ScorePolicy::kLfu;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, o.max_capacity / 2);
  size_t inserted = 0;
  size_t last_capacity = h->capacity();
  while (inserted < keys.size()) {
    const size_t n = std::min<size_t>(rng.uniform(1, 600), keys.size() - inserted);
    const std::vector<K> batch(keys.begin() + inserted, keys.begin() + inserted + n);
    // Half the batches go through find_or_insert, half through insert_or_assign.
    if (rng.chance(0.5)) {
      h.insert_or_assign(batch, value_rows(batch, h.dim()));
    } else {
      h.find_or_insert(batch);
    }
    inserted += n;
    const size_t capacity = h->capacity();
    expect_doubling_of(o, capacity);
    EXPECT_GE(capacity, last_capacity);
    last_capacity = capacity;
    ASSERT_EQ(h->size(), inserted);
    if (capacity < o.max_capacity) {
      EXPECT_LE(static_cast<double>(inserted), o.max_load_factor * static_cast<double>(capacity));
    }
  }
  const std::vector<K> all(keys.begin(), keys.end());
  EXPECT_EQ(h.contains(all), std::vector<bool>(all.size(), true));
  EXPECT_EQ(h->capacity(), o.max_capacity);
  const TableStats stats = h->stats();
  EXPECT_EQ(stats.evictions, 0u);
  EXPECT_EQ(stats.refused, 0u);
  EXPECT_EQ(stats.rehashes, 7u);
  // Rows and scores survived every rehash.
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), keys.size());
  for (K key : keys) EXPECT_EQ(s.at(key).score, 1u);
}

TYPED_TEST(TableGrowthTest, DoublesWhenTheLoadFactorWouldBeExceeded) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.init_capacity = 1024;
  o.max_capacity = 8192;
  o.max_load_factor = 0.5;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 513);
  // 512 keys fit exactly (8 buckets of 128 hold ~64 each, never a full bucket).
  for (size_t i = 0; i < 512; ++i) {
    h.insert_or_assign({keys[i]}, value_rows(std::vector<K>{keys[i]}, h.dim()));
  }
  EXPECT_EQ(h->capacity(), 1024u) << "grew before size exceeded max_load_factor * capacity";
  h.insert_or_assign({keys[512]}, value_rows(std::vector<K>{keys[512]}, h.dim()));
  EXPECT_EQ(h->capacity(), 2048u);
  EXPECT_EQ(h->stats().rehashes, 1u);
  EXPECT_EQ(h->size(), 513u);
  EXPECT_EQ(h.contains(keys), std::vector<bool>(keys.size(), true));
}

TYPED_TEST(TableGrowthTest, AFullBucketGrowsTheTableBeforeMax) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = tiny_options(ScorePolicy::kCustomized, SafeCheck::kError);
  o.max_capacity = 64 * 16;
  auto h = this->make(o);
  // 60 keys of one bucket (of 4): far more than its 16 slots, though the load is low.
  const auto keys = keys_in_bucket<K>(rng, rng.uniform(0, 3), 4, 60);
  std::vector<uint64_t> scores(keys.size());
  for (auto& s : scores) s = rng.uniform(0, 10);
  for (size_t i = 0; i < keys.size(); i += 20) {
    const std::vector<K> batch(keys.begin() + i, keys.begin() + i + 20);
    const std::vector<uint64_t> batch_scores(scores.begin() + i, scores.begin() + i + 20);
    EXPECT_NO_THROW(h.insert_or_assign(batch, value_rows(batch, h.dim()), batch_scores));
  }
  EXPECT_GT(h->capacity(), 64u);
  expect_doubling_of(o, h->capacity());
  EXPECT_EQ(h->stats().evictions, 0u);
  EXPECT_EQ(h->stats().refused, 0u);
  Snapshot<K> expected;
  for (size_t i = 0; i < keys.size(); ++i) {
    expected[keys[i]] = Entry{value_row(keys[i], h.dim()), scores[i]};
  }
  EXPECT_EQ(h.snapshot(), expected);
}

TYPED_TEST(TableGrowthTest, StopsAtMaxCapacityAndThenEvicts) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = tiny_options(ScorePolicy::kStep, SafeCheck::kIgnore);
  o.init_capacity = 64;
  o.max_capacity = 256;
  o.max_load_factor = 0.75;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 1000);
  for (size_t i = 0; i < keys.size(); i += 50) {
    h->advance_step();
    const std::vector<K> batch(keys.begin() + i, keys.begin() + i + 50);
    h.insert_or_assign(batch, value_rows(batch, h.dim()));
    EXPECT_LE(h->size(), 256u);
  }
  EXPECT_EQ(h->capacity(), 256u);
  EXPECT_EQ(h->stats().rehashes, 2u);
  // Each later step outranks every earlier one, so every insert at max was accepted.
  EXPECT_EQ(h->stats().refused, 0u);
  EXPECT_EQ(h->stats().evictions + h->size(), keys.size());
  // The last batch is entirely present.
  const std::vector<K> last(keys.end() - 50, keys.end());
  EXPECT_EQ(h.contains(last), std::vector<bool>(50, true));
}

TYPED_TEST(TableGrowthTest, ReserveDoublesUntilEnoughAndKeepsKeys) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.init_capacity = 256;
  o.max_capacity = 256 * 32;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 100);
  h.insert_or_assign(keys, value_rows(keys, h.dim()), std::vector<uint64_t>(100, 8));
  const Snapshot<K> before = h.snapshot();
  h->reserve(100);  // already enough
  EXPECT_EQ(h->capacity(), 256u);
  h->reserve(1000);
  EXPECT_EQ(h->capacity(), 1024u);
  EXPECT_EQ(h.snapshot(), before);
  h->reserve(1025);
  EXPECT_EQ(h->capacity(), 2048u);
  h->reserve(o.max_capacity);
  EXPECT_EQ(h->capacity(), o.max_capacity);
  EXPECT_EQ(h->stats().rehashes, 5u);
  EXPECT_EQ(h.snapshot(), before);
}

TYPED_TEST(TableGrowthTest, ReservePastMaxIsInvalidAndChangesNothing) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.init_capacity = 256;
  o.max_capacity = 1024;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 50);
  h.insert_or_assign(keys, value_rows(keys, h.dim()));
  const Snapshot<K> before = h.snapshot();
  EXPECT_THROW(h->reserve(1025), InvalidArgument);
  EXPECT_EQ(h->capacity(), 256u);
  EXPECT_EQ(h.snapshot(), before);
}

}  // namespace
}  // namespace dynemb::testing

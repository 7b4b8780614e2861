// The caching table over every Storage: the same contents as one big CPU table under random
// batches of every call, nothing lost when many distinct keys stream through a fast tier of 1%,
// a lower tier that fails, dumps through the checkpoint API.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "storage/storage_kinds.hpp"

namespace dynemb::testing {
namespace {

using storage::CachedTable;
using K = int64_t;

TableOptions fast_options(uint32_t dim, uint64_t slots, uint32_t bucket, ScorePolicy policy) {
  TableOptions o;
  o.dim = dim;
  o.init_capacity = slots;
  o.max_capacity = slots;
  o.bucket_capacity = bucket;
  o.max_load_factor = 1.0;
  o.score_policy = policy;
  o.num_threads = 1;  // batch order for repeated keys, as the reference
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = 1234;
  return o;
}

// A CPU table large enough to hold every row: the reference.
std::unique_ptr<Table<K>> big_table(const TableOptions& fast) {
  TableOptions o = fast;
  o.init_capacity = 1 << 16;
  o.max_capacity = 1 << 16;
  o.bucket_capacity = 128;
  o.max_load_factor = 0.5;
  return make_table<K>(Backend::kCpu, o);
}

template <class Kind>
class CachedTableOverStorage : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kind_.skip_reason(); !why.empty()) GTEST_SKIP() << why;
  }
  Kind kind_;
};

using Kinds = ::testing::Types<HostKind, RocksDbKind, RedisKind, MapKind>;
TYPED_TEST_SUITE(CachedTableOverStorage, Kinds, KindName);

// Every key of `keys` read from both tables: same presence, rows and scores.
void expect_same(Table<K>& cached, Table<K>& big, const std::vector<K>& keys, bool scores) {
  const size_t n = keys.size();
  const uint32_t dim = big.dim();
  std::vector<float> a(n * dim, 0.0f), b(n * dim, 0.0f);
  std::vector<uint64_t> sa(n, 0), sb(n, 0);
  std::unique_ptr<bool[]> fa(new bool[n]), fb(new bool[n]);
  cached.find(n, keys.data(), a.data(), fa.get(), sa.data());
  big.find(n, keys.data(), b.data(), fb.get(), sb.data());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(fa[i], fb[i]) << "key " << keys[i];
    if (!fb[i]) continue;
    if (scores) EXPECT_EQ(sa[i], sb[i]) << "key " << keys[i];
    for (uint32_t c = 0; c < dim; ++c)
      ASSERT_EQ(a[i * dim + c], b[i * dim + c]) << "key " << keys[i];
  }
}

// Where each key is: in the fast tier only, below only, in both (none must be in both before a
// flush).
struct Census {
  size_t fast = 0, below = 0, both = 0;
};
Census census(CachedTable<K>& cached, const std::vector<K>& keys) {
  const size_t n = keys.size();
  Census c;
  std::unique_ptr<bool[]> in_fast(new bool[n]), below(new bool[n]);
  cached.fast_table().contains(n, keys.data(), in_fast.get());
  std::vector<uint64_t> bits(keys.begin(), keys.end()), scores(n);
  std::vector<float> rows(n * cached.dim());
  cached.lower().find(n, bits.data(), rows.data(), scores.data(), below.get());
  for (size_t i = 0; i < n; ++i) {
    c.fast += in_fast[i] && !below[i];
    c.below += below[i] && !in_fast[i];
    c.both += in_fast[i] && below[i];
  }
  return c;
}

// How many of the distinct `keys` an empty fast tier of options `fast` cannot hold at once (the
// keys beyond their bucket's slots): the call's own keys the caching table may push out.
size_t own_overflow(const TableOptions& fast, const std::vector<K>& keys) {
  TableOptions o = fast;
  o.score_policy = ScorePolicy::kCustomized;
  auto empty = make_table<K>(Backend::kCpu, o);
  const std::vector<float> rows(keys.size() * fast.dim, 0.0f);
  const std::vector<uint64_t> same(keys.size(), 1);  // equal scores: each full bucket evicts
  empty->insert_or_assign(keys.size(), keys.data(), rows.data(), same.data());
  return keys.size() - empty->size();
}

using MakeStorage = std::function<std::shared_ptr<storage::Storage>(uint32_t)>;

// Random batches of every call on a caching table (fast tier: 256 slots for 2000 keys) and on
// one big table; both must agree on every result and, at the end, on every row and score.
void run_random_calls(TestRng& rng, const MakeStorage& make, ScorePolicy policy) {
  const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 9));
  const TableOptions fo = fast_options(dim, 256, 16, policy);  // 16 buckets of 16
  CachedTable<K> cached(Backend::kCpu, fo, make(dim));
  auto big = big_table(fo);
  const uint64_t key_space = 2000;
  std::vector<K> all;
  for (K k = 0; k < static_cast<K>(key_space); ++k) all.push_back(k);
  for (int round = 0; round < 60; ++round) {
    const size_t n = rng.uniform(1, 300);
    std::vector<K> keys(n);
    for (auto& k : keys) k = static_cast<K>(rng.uniform(0, key_space - 1));
    std::vector<float> values(n * dim);
    for (auto& v : values) v = static_cast<float>(rng.uniform(0, 1000)) / 8.0f;
    std::vector<uint64_t> scores(n);
    for (auto& s : scores) s = rng.uniform(1, 50);
    const uint64_t* given = rng.chance(0.5) ? scores.data() : nullptr;
    std::vector<float> out_a(n * dim), out_b(n * dim);
    std::unique_ptr<bool[]> fa(new bool[n]), fb(new bool[n]);
    switch (rng.uniform(0, 7)) {
      case 0:
        cached.find_or_insert(n, keys.data(), out_a.data(), fa.get(), given);
        big->find_or_insert(n, keys.data(), out_b.data(), fb.get(), given);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(fa[i], fb[i]) << "find_or_insert founds " << i;
        ASSERT_EQ(out_a, out_b) << "find_or_insert rows";
        break;
      case 1:
        cached.insert_or_assign(n, keys.data(), values.data(), given);
        big->insert_or_assign(n, keys.data(), values.data(), given);
        break;
      case 2:
        cached.accum_or_assign(n, keys.data(), values.data(), given);
        big->accum_or_assign(n, keys.data(), values.data(), given);
        break;
      case 3:
        cached.assign(n, keys.data(), values.data(), given);
        big->assign(n, keys.data(), values.data(), given);
        break;
      case 4: {
        std::vector<K> few(keys.begin(), keys.begin() + std::min<size_t>(n, 20));
        cached.erase(few.size(), few.data());
        big->erase(few.size(), few.data());
        break;
      }
      case 5: {  // training-style: rows by address, updated in place
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        keys.resize(std::min<size_t>(keys.size(), 100));
        const size_t m = keys.size();
        std::vector<float*> ra(m), rb(m);
        const size_t overflow = own_overflow(fo, keys);
        const uint64_t pushed_before = cached.caching_stats().batch_evicted;
        cached.find_or_insert_pointers(m, keys.data(), ra.data(), fa.get(), given);
        big->find_or_insert_pointers(m, keys.data(), rb.data(), fb.get(), given);
        size_t left = 0;
        for (size_t i = 0; i < m; ++i) {
          ASSERT_EQ(fa[i], fb[i]);
          ASSERT_NE(rb[i], nullptr);
          // A key beyond its bucket's slots went down (docs/storage.md): no address, so neither
          // table updates it; its row is checked below.
          if (ra[i] == nullptr) {
            ++left;
            continue;
          }
          for (uint32_t c = 0; c < dim; ++c) {
            ASSERT_EQ(ra[i][c], rb[i][c]);
            ra[i][c] += 0.25f * static_cast<float>(c + 1);
            rb[i][c] += 0.25f * static_cast<float>(c + 1);
          }
        }
        ASSERT_EQ(left, overflow) << "a batch key left the fast tier while its bucket had room";
        ASSERT_EQ(cached.caching_stats().batch_evicted - pushed_before, overflow);
        expect_same(cached, *big, keys, true);  // the pushed-out keys' rows are kept below
        break;
      }
      case 6:
        cached.assign_scores(n, keys.data(), scores.data());
        big->assign_scores(n, keys.data(), scores.data());
        break;
      default: {
        std::vector<float> a(n * dim, -3.0f), b(n * dim, -3.0f);
        cached.find(n, keys.data(), a.data(), fa.get(), nullptr);
        big->find(n, keys.data(), b.data(), fb.get(), nullptr);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(fa[i], fb[i]);
        ASSERT_EQ(a, b);
        cached.contains(n, keys.data(), fa.get());
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(fa[i], fb[i]);
      }
    }
    if (policy == ScorePolicy::kStep && rng.chance(0.3)) {
      cached.advance_step();
      big->advance_step();
    }
  }
  expect_same(cached, *big, all, true);
  const Census c = census(cached, all);
  EXPECT_EQ(c.both, 0u);
  EXPECT_EQ(c.fast + c.below, big->size());
  EXPECT_EQ(cached.size(), big->size());
  const storage::CachingStats s = cached.caching_stats();
  EXPECT_GT(s.evictions_written, 0u) << "the fast tier never evicted: the test shows nothing";
  EXPECT_GT(s.rows_up, 0u);
  EXPECT_EQ(s.pending_rows, 0u);
}

TYPED_TEST(CachedTableOverStorage, RandomCallsMatchOneBigTable) {
  TestRng rng;
  for (const ScorePolicy policy :
       {ScorePolicy::kCustomized, ScorePolicy::kLfu, ScorePolicy::kStep}) {
    SCOPED_TRACE(to_string(policy));
    run_random_calls(
        rng, [&](uint32_t dim) { return this->kind_.make(dim); }, policy);
  }
}

// The scenario of a CI failure (DYNEMB_TEST_SEED=8754333969437016467: a pointer call of 100 keys
// put 18 into one bucket of 16 slots): a pointer call with more keys for a bucket than it has
// slots. The keys beyond the slots go down with their rows and get nullptr (counted in
// batch_evicted); the other keys of the fast tier leave first; nothing is lost.
TYPED_TEST(CachedTableOverStorage, PointerCallLargerThanABucketKeepsEveryRow) {
  const uint32_t dim = 3;
  const TableOptions fo = fast_options(dim, 16, 16, ScorePolicy::kCustomized);  // one bucket
  CachedTable<K> cached(Backend::kCpu, fo, this->kind_.make(dim));
  auto big = big_table(fo);
  std::vector<K> others, batch, all;
  for (K k = 1000; k < 1016; ++k) others.push_back(k);
  for (K k = 0; k < 20; ++k) batch.push_back(k);
  all = others;
  all.insert(all.end(), batch.begin(), batch.end());
  std::vector<float> values(others.size() * dim);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) / 4.0f;
  const std::vector<uint64_t> low(others.size(), 5);
  cached.insert_or_assign(others.size(), others.data(), values.data(), low.data());
  big->insert_or_assign(others.size(), others.data(), values.data(), low.data());
  ASSERT_EQ(own_overflow(fo, batch), 4u);

  const std::vector<uint64_t> scores(batch.size(), 9);
  std::vector<float*> ra(batch.size()), rb(batch.size());
  std::unique_ptr<bool[]> fa(new bool[batch.size()]), fb(new bool[batch.size()]);
  cached.find_or_insert_pointers(batch.size(), batch.data(), ra.data(), fa.get(), scores.data());
  big->find_or_insert_pointers(batch.size(), batch.data(), rb.data(), fb.get(), scores.data());
  size_t left = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_FALSE(fa[i]);
    if (ra[i] == nullptr) {
      ++left;
      continue;
    }
    for (uint32_t c = 0; c < dim; ++c) EXPECT_EQ(ra[i][c], rb[i][c]) << "key " << batch[i];
  }
  EXPECT_EQ(left, 4u);
  const storage::CachingStats s = cached.caching_stats();
  EXPECT_EQ(s.batch_evicted, 4u);
  EXPECT_EQ(s.evictions_written, others.size() + 4);  // every other key, then the 4 extra
  EXPECT_EQ(s.pending_rows, 0u);
  expect_same(cached, *big, all, true);
  const Census c = census(cached, all);
  EXPECT_EQ(c.both, 0u);
  EXPECT_EQ(c.fast, 16u);
  EXPECT_EQ(c.below, others.size() + 4);
  EXPECT_EQ(cached.size(), all.size());
}

}  // namespace
}  // namespace dynemb::testing

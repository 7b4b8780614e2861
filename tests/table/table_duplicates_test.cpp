// Duplicate keys inside one batch: the result of some sequential order of the batch, the same
// order for every effect of the call.
#include <gtest/gtest.h>

#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableDuplicatesTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableDuplicatesTest, AllTableConfigs, TableConfigNames);

// A large batch drawn with repetition from `distinct` keys (large enough for parallel paths).
template <TableKey K>
std::vector<K> batch_with_repeats(TestRng& rng, const std::vector<K>& distinct, size_t n) {
  std::vector<K> batch(n);
  for (auto& k : batch) k = distinct[rng.uniform(0, distinct.size() - 1)];
  return batch;
}

// Small integral rows, so sums are exact in any order.
std::vector<float> small_integer_rows(TestRng& rng, size_t n, uint32_t dim) {
  std::vector<float> v(n * dim);
  for (auto& x : v) x = static_cast<float>(rng.uniform(1, 4));
  return v;
}

TYPED_TEST(TableDuplicatesTest, InsertOrAssignStoresOneCopyWithItsScore) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto distinct = random_keys<K>(rng, 300);
  const auto batch = batch_with_repeats(rng, distinct, 20000);
  const std::vector<float> values = small_integer_rows(rng, batch.size(), h.dim());
  std::vector<uint64_t> scores(batch.size());
  for (auto& s : scores) s = rng.next() >> 1;
  // Each key's candidates: (row, score) of each of its copies.
  std::map<K, std::vector<Entry>> copies;
  for (size_t i = 0; i < batch.size(); ++i) {
    copies[batch[i]].push_back(Entry{row_at(values, i, h.dim()), scores[i]});
  }
  for (int call = 0; call < 2; ++call) {  // new keys, then existing keys
    SCOPED_TRACE(call);
    if (call == 0) {
      h.insert_or_assign(batch, values, scores);
    } else {
      h.insert_and_evict(batch, values, scores);
    }
    const Snapshot<K> s = h.snapshot();
    ASSERT_EQ(s.size(), copies.size());
    for (const auto& [key, candidates] : copies) {
      const Entry& stored = s.at(key);
      EXPECT_NE(std::find(candidates.begin(), candidates.end(), stored), candidates.end())
          << "key " << key << " stores a row/score pair no single copy gave";
    }
  }
}

TYPED_TEST(TableDuplicatesTest, AssignStoresOneCopyOfStoredKeysOnly) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto distinct = random_keys<K>(rng, 200);
  const std::vector<K> stored(distinct.begin(), distinct.begin() + 100);
  h.insert_or_assign(stored, value_rows(stored, h.dim()), std::vector<uint64_t>(100, 1));
  const auto batch = batch_with_repeats(rng, distinct, 10000);
  const std::vector<float> values = small_integer_rows(rng, batch.size(), h.dim());
  std::vector<uint64_t> scores(batch.size());
  for (auto& s : scores) s = rng.uniform(2, 1u << 30);
  h.assign(batch, values, scores);
  std::map<K, std::vector<Entry>> copies;
  for (size_t i = 0; i < batch.size(); ++i) {
    copies[batch[i]].push_back(Entry{row_at(values, i, h.dim()), scores[i]});
  }
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), stored.size());
  for (K key : stored) {
    const auto it = copies.find(key);
    if (it == copies.end()) {
      EXPECT_EQ(s.at(key), (Entry{value_row(key, h.dim()), 1}));
    } else {
      EXPECT_NE(std::find(it->second.begin(), it->second.end(), s.at(key)), it->second.end());
    }
  }
}

TYPED_TEST(TableDuplicatesTest, FindOrInsertReportsExactlyOneNewCopyAndOneRow) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = rng.next();
  auto h = this->make(o);
  const auto distinct = random_keys<K>(rng, 400);
  const std::vector<K> stored(distinct.begin(), distinct.begin() + 100);
  h.insert_or_assign(stored, value_rows(stored, h.dim()));
  const std::set<K> was_stored(stored.begin(), stored.end());
  const auto batch = batch_with_repeats(rng, distinct, 20000);
  const FindResult r = h.find_or_insert(batch);
  std::map<K, int> not_found_copies;
  for (size_t i = 0; i < batch.size(); ++i) {
    const K key = batch[i];
    const bool existed = was_stored.count(key) > 0;
    if (!r.founds[i]) ++not_found_copies[key];
    if (existed) EXPECT_TRUE(r.founds[i]) << i;
    const Row expected =
        existed ? value_row(key, h.dim()) : initial_row(o.initializer, key, h.dim());
    EXPECT_EQ(row_at(r.values, i, h.dim()), expected) << i;
  }
  for (K key : std::set<K>(batch.begin(), batch.end())) {
    if (!was_stored.count(key)) EXPECT_EQ(not_found_copies[key], 1) << "key " << key;
  }
}

TYPED_TEST(TableDuplicatesTest, FindOrInsertGivenStoresOneCopysRowAndCopiesItToTheOthers) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto distinct = random_keys<K>(rng, 400);
  const std::vector<K> stored(distinct.begin(), distinct.begin() + 100);
  h.insert_or_assign(stored, value_rows(stored, h.dim()));
  const std::set<K> was_stored(stored.begin(), stored.end());
  const auto batch = batch_with_repeats(rng, distinct, 20000);
  // Each copy offers its own row, so the stored one tells which copy inserted.
  std::vector<float> given(batch.size() * h.dim());
  for (size_t i = 0; i < batch.size(); ++i) {
    for (uint32_t j = 0; j < h.dim(); ++j) given[i * h.dim() + j] = float(i) + 0.5f * float(j);
  }
  const FindResult r = h.find_or_insert_given(batch, given);
  const Snapshot<K> s = h.snapshot();
  std::map<K, size_t> inserting_copy;
  for (size_t i = 0; i < batch.size(); ++i) {
    const K key = batch[i];
    ASSERT_TRUE(s.count(key)) << "key " << key;
    EXPECT_EQ(row_at(r.values, i, h.dim()), s.at(key).row) << i;
    if (was_stored.count(key)) {
      EXPECT_TRUE(r.founds[i]) << i;
      EXPECT_EQ(s.at(key).row, value_row(key, h.dim())) << i;
    } else if (!r.founds[i]) {
      EXPECT_TRUE(inserting_copy.emplace(key, i).second) << "two copies inserted key " << key;
      EXPECT_EQ(s.at(key).row, row_at(given, i, h.dim())) << i;
    }
  }
  EXPECT_EQ(inserting_copy.size() + was_stored.size(), s.size());
}

TYPED_TEST(TableDuplicatesTest, LfuCountsEveryCopy) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options(ScorePolicy::kLfu));
  const auto distinct = random_keys<K>(rng, 300);
  const auto first = batch_with_repeats(rng, distinct, 15000);
  const auto second = batch_with_repeats(rng, distinct, 15000);
  std::vector<uint64_t> inc(second.size());
  for (auto& x : inc) x = rng.uniform(1, 9);
  std::map<K, uint64_t> expected;
  for (K key : first) ++expected[key];
  for (size_t i = 0; i < second.size(); ++i) expected[second[i]] += inc[i];
  h.find_or_insert(first);
  h.accum_or_assign(second, small_integer_rows(rng, second.size(), h.dim()), inc);
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), expected.size());
  for (const auto& [key, count] : expected) EXPECT_EQ(s.at(key).score, count) << "key " << key;
}

TYPED_TEST(TableDuplicatesTest, AccumOrAssignAddsEveryCopy) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto distinct = random_keys<K>(rng, 300);
  const std::vector<K> stored(distinct.begin(), distinct.begin() + 150);
  h.insert_or_assign(stored, value_rows(stored, h.dim()));
  std::map<K, Row> expected;
  for (K key : stored) expected[key] = value_row(key, h.dim());
  const auto batch = batch_with_repeats(rng, distinct, 20000);
  const std::vector<float> values = small_integer_rows(rng, batch.size(), h.dim());
  for (size_t i = 0; i < batch.size(); ++i) {
    Row& row = expected.try_emplace(batch[i], Row(h.dim(), 0.0f)).first->second;
    for (uint32_t j = 0; j < h.dim(); ++j) row[j] += values[i * h.dim() + j];
  }
  h.accum_or_assign(batch, values);
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), expected.size());
  for (const auto& [key, row] : expected) EXPECT_EQ(s.at(key).row, row) << "key " << key;
}

TYPED_TEST(TableDuplicatesTest, EraseOfRepeatedKeysRemovesEachOnce) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto distinct = random_keys<K>(rng, 200);
  h.insert_or_assign(distinct, value_rows(distinct, h.dim()));
  const std::vector<K> half(distinct.begin(), distinct.begin() + 100);
  const auto batch = batch_with_repeats(rng, half, 5000);
  const std::set<K> doomed(batch.begin(), batch.end());
  h.erase(batch);
  EXPECT_EQ(h->size(), distinct.size() - doomed.size());
  EXPECT_EQ(h->stats().erased, doomed.size());
}

}  // namespace
}  // namespace dynemb::testing

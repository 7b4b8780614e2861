// Each batch operation of docs/table_contract.md, on every backend and key type.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableOpsTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableOpsTest, AllTableConfigs, TableConfigNames);

// Random distinct scores in [1, 1e6] for `n` keys.
std::vector<uint64_t> random_scores(TestRng& rng, size_t n) {
  std::vector<uint64_t> scores(n);
  for (auto& s : scores) s = rng.uniform(1, 1000000);
  return scores;
}

TYPED_TEST(TableOpsTest, FindReturnsStoredRowsScoresAndLeavesMissesUntouched) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 300);
  const std::vector<K> stored(keys.begin(), keys.begin() + 200);
  const auto scores = random_scores(rng, stored.size());
  h.insert_or_assign(stored, value_rows(stored, h.dim()), scores);

  const FindResult r = h.find(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < stored.size()) {
      EXPECT_TRUE(r.founds[i]) << i;
      EXPECT_EQ(row_at(r.values, i, h.dim()), value_row(keys[i], h.dim())) << i;
      EXPECT_EQ(r.scores[i], scores[i]) << i;
    } else {
      EXPECT_FALSE(r.founds[i]) << i;
      EXPECT_EQ(row_at(r.values, i, h.dim()), Row(h.dim(), kUntouchedValue)) << i;
      EXPECT_EQ(r.scores[i], kUntouchedScore) << i;
    }
  }
}

TYPED_TEST(TableOpsTest, FindAcceptsNullFoundsAndScores) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 50);
  h.insert_or_assign(keys, value_rows(keys, h.dim()));
  auto k = h.upload(keys);
  auto v = h.filled(keys.size() * h.dim(), kUntouchedValue);
  h->find(keys.size(), k.data(), v.data(), nullptr, nullptr);
  EXPECT_EQ(h.download(v, keys.size() * h.dim()), value_rows(keys, h.dim()));
}

TYPED_TEST(TableOpsTest, FindWithMissesListsMissesInBatchOrder) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  auto keys = random_keys<K>(rng, 400);
  std::vector<K> stored;
  std::vector<bool> is_stored(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    is_stored[i] = rng.chance(0.5);
    if (is_stored[i]) stored.push_back(keys[i]);
  }
  std::vector<uint64_t> scores = random_scores(rng, stored.size());
  h.insert_or_assign(stored, value_rows(stored, h.dim()), scores);
  std::map<K, uint64_t> score_of;
  for (size_t i = 0; i < stored.size(); ++i) score_of[stored[i]] = scores[i];

  const MissResult<K> r = h.find_with_misses(keys);
  std::vector<K> expected_missed;
  std::vector<uint64_t> expected_indices;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (is_stored[i]) {
      EXPECT_EQ(row_at(r.values, i, h.dim()), value_row(keys[i], h.dim())) << i;
      EXPECT_EQ(r.scores[i], score_of[keys[i]]) << i;
    } else {
      expected_missed.push_back(keys[i]);
      expected_indices.push_back(i);
      EXPECT_EQ(row_at(r.values, i, h.dim()), Row(h.dim(), kUntouchedValue)) << i;
    }
  }
  EXPECT_EQ(r.missed, expected_missed.size());
  EXPECT_EQ(r.missed_keys, expected_missed);
  EXPECT_EQ(r.missed_indices, expected_indices);
}

TYPED_TEST(TableOpsTest, ContainsReportsStoredKeys) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 300);
  std::vector<K> stored;
  std::vector<bool> expected(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    expected[i] = rng.chance(0.3);
    if (expected[i]) stored.push_back(keys[i]);
  }
  h.insert_or_assign(stored, value_rows(stored, h.dim()));
  EXPECT_EQ(h.contains(keys), expected);
}

TYPED_TEST(TableOpsTest, FindOrInsertGivesInitializerRowsToNewKeys) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (InitializerKind kind :
       {InitializerKind::kUniform, InitializerKind::kNormal, InitializerKind::kTruncatedNormal,
        InitializerKind::kConstant, InitializerKind::kDebug}) {
    SCOPED_TRACE(to_string(kind));
    TableOptions o = roomy_options(ScorePolicy::kCustomized, 7);
    o.initializer.kind = kind;
    o.initializer.seed = rng.next();
    o.initializer.low = -0.5f;
    o.initializer.high = 1.5f;
    o.initializer.mean = 0.25f;
    o.initializer.stddev = 2.0f;
    o.initializer.value = 3.75f;
    auto h = this->make(o);
    const auto keys = random_keys<K>(rng, 100);
    const std::vector<K> existing(keys.begin(), keys.begin() + 30);
    h.insert_or_assign(existing, value_rows(existing, h.dim()));

    const FindResult r = h.find_or_insert(keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      const bool was_there = i < existing.size();
      EXPECT_EQ(r.founds[i], was_there) << i;
      const Row expected =
          was_there ? value_row(keys[i], h.dim()) : initial_row(o.initializer, keys[i], h.dim());
      EXPECT_EQ(row_at(r.values, i, h.dim()), expected) << i;
    }
    EXPECT_EQ(h->size(), keys.size());
    // The new rows are stored, and a second call finds them all.
    const FindResult again = h.find_or_insert(keys);
    EXPECT_EQ(again.values, r.values);
    EXPECT_EQ(again.founds, std::vector<bool>(keys.size(), true));
  }
}

TYPED_TEST(TableOpsTest, FindOrInsertAcceptsNullFounds) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.initializer.kind = InitializerKind::kDebug;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 40);
  auto k = h.upload(keys);
  auto v = h.filled(keys.size() * h.dim(), kUntouchedValue);
  h->find_or_insert(keys.size(), k.data(), v.data(), nullptr);
  std::vector<float> expected;
  for (K key : keys) {
    const Row row = initial_row(o.initializer, key, h.dim());
    expected.insert(expected.end(), row.begin(), row.end());
  }
  EXPECT_EQ(h.download(v, keys.size() * h.dim()), expected);
  EXPECT_EQ(h->size(), keys.size());
}

// Rows of n x dim distinct-looking floats, drawn fresh.
inline std::vector<float> random_value_rows(TestRng& rng, size_t n, uint32_t dim) {
  std::vector<float> v(n * dim);
  for (auto& x : v) x = static_cast<float>(rng.uniform(0, 1u << 20)) * 0.125f - 4096.0f;
  return v;
}

TYPED_TEST(TableOpsTest, FindOrInsertGivenStoresTheCallersRowsForNewKeys) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options(ScorePolicy::kCustomized, 7);
  o.initializer.kind = InitializerKind::kDebug;  // a row the caller did not give would show
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 150);
  const std::vector<K> existing(keys.begin(), keys.begin() + 50);
  h.insert_or_assign(existing, value_rows(existing, h.dim()), std::vector<uint64_t>(50, 3));
  const std::vector<float> given = random_value_rows(rng, keys.size(), h.dim());
  std::vector<uint64_t> scores(keys.size());
  for (auto& x : scores) x = rng.uniform(10, 1000);

  const FindResult r = h.find_or_insert_given(keys, given, scores);
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool was_there = i < existing.size();
    EXPECT_EQ(r.founds[i], was_there) << i;
    const Row expected = was_there ? value_row(keys[i], h.dim()) : row_at(given, i, h.dim());
    EXPECT_EQ(row_at(r.values, i, h.dim()), expected) << i;
    EXPECT_EQ(s.at(keys[i]), (Entry{expected, scores[i]})) << i;
  }
  // Null founds are accepted; stored keys now copy out, whatever the buffer held.
  auto k = h.upload(keys);
  auto v = h.upload(random_value_rows(rng, keys.size(), h.dim()));
  h->find_or_insert_given(keys.size(), k.data(), v.data(), nullptr);
  EXPECT_EQ(h.download(v, keys.size() * h.dim()), r.values);
  EXPECT_EQ(h->size(), keys.size());
}

TYPED_TEST(TableOpsTest, InsertOrAssignInsertsAndOverwrites) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 200);
  const std::vector<K> first(keys.begin(), keys.begin() + 120);
  const std::vector<K> second(keys.begin() + 60, keys.end());  // overlaps 60..119
  h.insert_or_assign(first, value_rows(first, h.dim(), 0.0f), std::vector<uint64_t>(120, 5));
  h.insert_or_assign(second, value_rows(second, h.dim(), 100.0f), std::vector<uint64_t>(140, 9));
  EXPECT_EQ(h->size(), keys.size());
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool overwritten = i >= 60;
    EXPECT_EQ(s.at(keys[i]), (Entry{value_row(keys[i], h.dim(), overwritten ? 100.0f : 0.0f),
                                    overwritten ? 9u : 5u}))
        << i;
  }
}

TYPED_TEST(TableOpsTest, AssignOverwritesOnlyStoredKeys) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 100);
  const std::vector<K> stored(keys.begin(), keys.begin() + 50);
  h.insert_or_assign(stored, value_rows(stored, h.dim()), std::vector<uint64_t>(50, 3));
  h.assign(keys, value_rows(keys, h.dim(), 7.0f), std::vector<uint64_t>(100, 11));
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), stored.size()) << "assign must not insert";
  for (K key : stored) EXPECT_EQ(s.at(key), (Entry{value_row(key, h.dim(), 7.0f), 11}));
}

TYPED_TEST(TableOpsTest, AssignScoresSetsExactScoresOfStoredKeysOnly) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (ScorePolicy policy :
       {ScorePolicy::kTimestamp, ScorePolicy::kStep, ScorePolicy::kLfu, ScorePolicy::kCustomized}) {
    SCOPED_TRACE(to_string(policy));
    auto h = this->make(roomy_options(policy));
    const auto keys = random_keys<K>(rng, 80);
    const std::vector<K> stored(keys.begin(), keys.begin() + 40);
    h.insert_or_assign(stored, value_rows(stored, h.dim()));
    const auto scores = random_scores(rng, keys.size());
    h.assign_scores(keys, scores);
    const Snapshot<K> s = h.snapshot();
    ASSERT_EQ(s.size(), stored.size()) << "assign_scores must not insert";
    for (size_t i = 0; i < stored.size(); ++i) {
      EXPECT_EQ(s.at(stored[i]), (Entry{value_row(stored[i], h.dim()), scores[i]})) << i;
    }
  }
}

TYPED_TEST(TableOpsTest, AccumOrAssignAddsToStoredRowsAndInsertsMissing) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 100);
  const std::vector<K> stored(keys.begin(), keys.begin() + 50);
  h.insert_or_assign(stored, value_rows(stored, h.dim()), std::vector<uint64_t>(50, 1));
  const std::vector<float> delta = value_rows(keys, h.dim(), 0.5f);
  h.accum_or_assign(keys, delta, std::vector<uint64_t>(100, 4));
  const Snapshot<K> s = h.snapshot();
  ASSERT_EQ(s.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Row expected = row_at(delta, i, h.dim());
    if (i < stored.size()) {
      const Row old = value_row(keys[i], h.dim());
      for (uint32_t j = 0; j < h.dim(); ++j) expected[j] = old[j] + expected[j];
    }
    EXPECT_EQ(s.at(keys[i]), (Entry{expected, 4})) << i;
  }
}

TYPED_TEST(TableOpsTest, EraseRemovesStoredKeysAndCountsThem) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 200);
  const std::vector<K> stored(keys.begin(), keys.begin() + 150);
  h.insert_or_assign(stored, value_rows(stored, h.dim()));
  // Erase 100 stored keys and 50 never-stored ones.
  const std::vector<K> doomed(keys.begin() + 50, keys.end());
  h.erase(doomed);
  EXPECT_EQ(h->size(), 50u);
  EXPECT_EQ(h->stats().erased, 100u);
  std::vector<bool> expected(keys.size(), false);
  std::fill(expected.begin(), expected.begin() + 50, true);
  EXPECT_EQ(h.contains(keys), expected);
  // An erased key can come back.
  h.insert_or_assign(doomed, value_rows(doomed, h.dim(), 1.0f));
  EXPECT_EQ(h->size(), 200u);
}

TYPED_TEST(TableOpsTest, EraseIfRemovesExactlyTheMatchingScores) {
  using K = typename TestFixture::Key;
  TestRng rng;
  const auto keys = random_keys<K>(rng, 300);
  std::vector<uint64_t> scores(keys.size());
  for (auto& s : scores) s = rng.uniform(0, 40);  // many ties
  const uint64_t threshold = rng.uniform(5, 35);
  for (ScoreCompare compare :
       {ScoreCompare::kLess, ScoreCompare::kLessEqual, ScoreCompare::kGreater,
        ScoreCompare::kGreaterEqual, ScoreCompare::kEqual}) {
    SCOPED_TRACE(static_cast<int>(compare));
    const ScorePredicate predicate{compare, threshold};
    auto h = this->make(roomy_options());
    h.insert_or_assign(keys, value_rows(keys, h.dim()), scores);
    Snapshot<K> expected;
    size_t matching = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (matches(predicate, scores[i])) {
        ++matching;
      } else {
        expected[keys[i]] = Entry{value_row(keys[i], h.dim()), scores[i]};
      }
    }
    EXPECT_EQ(h->erase_if(predicate), matching);
    EXPECT_EQ(h.snapshot(), expected);
    EXPECT_EQ(h->size(), expected.size());
    EXPECT_EQ(h->stats().erased, matching);
  }
}

TYPED_TEST(TableOpsTest, ClearRemovesEveryKeyAndKeepsCapacityAndStats) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.init_capacity = 256;
  o.max_capacity = 4096;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 600);
  h.insert_or_assign(keys, value_rows(keys, h.dim()));
  h.erase({keys[0]});
  const size_t capacity = h->capacity();
  const TableStats before = h->stats();
  ASSERT_GT(capacity, 256u);
  h->clear();
  EXPECT_EQ(h->size(), 0u);
  EXPECT_EQ(h->capacity(), capacity);
  EXPECT_EQ(h.snapshot().size(), 0u);
  EXPECT_EQ(h.contains(keys), std::vector<bool>(keys.size(), false));
  const TableStats after = h->stats();
  EXPECT_EQ(after.erased, before.erased);
  EXPECT_EQ(after.rehashes, before.rehashes);
  // The table works after clear.
  h.insert_or_assign(keys, value_rows(keys, h.dim(), 2.0f));
  EXPECT_EQ(h->size(), keys.size());
}

TYPED_TEST(TableOpsTest, SizeCapacityAndLoadFactorCount) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  EXPECT_EQ(h->size(), 0u);
  EXPECT_EQ(h->capacity(), 4096u);
  EXPECT_EQ(h->load_factor(), 0.0);
  const auto keys = random_keys<K>(rng, 1000);
  h.insert_or_assign(keys, value_rows(keys, h.dim()));
  EXPECT_EQ(h->size(), 1000u);
  EXPECT_DOUBLE_EQ(h->load_factor(), 1000.0 / 4096.0);
  h.insert_or_assign(keys, value_rows(keys, h.dim(), 1.0f));  // overwrites only
  EXPECT_EQ(h->size(), 1000u);
}

TYPED_TEST(TableOpsTest, ExportBatchWalkVisitsEveryKeyExactlyOnce) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.init_capacity = 1024;
  o.max_capacity = 1024;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 400);
  const auto scores = random_scores(rng, keys.size());
  h.insert_or_assign(keys, value_rows(keys, h.dim()), scores);
  Snapshot<K> expected;
  for (size_t i = 0; i < keys.size(); ++i) {
    expected[keys[i]] = Entry{value_row(keys[i], h.dim()), scores[i]};
  }
  for (size_t step : {size_t{1}, size_t{7}, size_t{100}, size_t{128}, size_t{1024}}) {
    SCOPED_TRACE(step);
    EXPECT_EQ(h.snapshot(step), expected);
  }
}

TYPED_TEST(TableOpsTest, ExportBatchWithMinScoreExportsOnlyHigherScores) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 500);
  std::vector<uint64_t> scores(keys.size());
  for (auto& s : scores) s = rng.uniform(0, 100);
  h.insert_or_assign(keys, value_rows(keys, h.dim()), scores);
  const uint64_t min_score = rng.uniform(10, 90);
  Snapshot<K> expected;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (scores[i] >= min_score) expected[keys[i]] = Entry{value_row(keys[i], h.dim()), scores[i]};
  }
  for (size_t step : {size_t{33}, size_t{4096}}) {
    SCOPED_TRACE(step);
    EXPECT_EQ(h.snapshot(step, min_score), expected);
  }
}

// export_batch's range ends at capacity(): slots past it are not read, whatever n_slots (up to
// SIZE_MAX) asks for, and an offset at or past capacity() exports nothing.
TYPED_TEST(TableOpsTest, ExportBatchStopsAtCapacity) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.init_capacity = 1024;
  o.max_capacity = 1024;
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 500);
  const auto scores = random_scores(rng, keys.size());
  h.insert_or_assign(keys, value_rows(keys, h.dim()), scores);
  const size_t capacity = h->capacity();
  const size_t offset = rng.uniform(1, capacity - 1);
  const size_t room = capacity - offset;  // the outputs hold exactly the slots that exist
  const RowsResult<K> tail = h.export_batch(offset, room);
  for (size_t n_slots : {room + 1, room + 1000, std::numeric_limits<size_t>::max()}) {
    SCOPED_TRACE("offset " + std::to_string(offset) + ", n_slots " + std::to_string(n_slots));
    auto k = h.filled(room, K{0});
    auto v = h.filled(room * h.dim(), kUntouchedValue);
    auto s = h.filled(room, kUntouchedScore);
    const size_t count = h->export_batch(offset, n_slots, k.data(), v.data(), s.data());
    ASSERT_EQ(count, tail.count);
    EXPECT_EQ(h.download(k, count), tail.keys);
    EXPECT_EQ(h.download(v, count * h.dim()), tail.values);
    EXPECT_EQ(h.download(s, count), tail.scores);
  }
  // The walk's last step, asked for more slots than remain, completes the snapshot.
  const RowsResult<K> head = h.export_batch(0, offset);
  Snapshot<K> walked = head.as_map(h.dim());
  const Snapshot<K> rest = tail.as_map(h.dim());
  walked.insert(rest.begin(), rest.end());
  EXPECT_EQ(walked.size(), keys.size());
  EXPECT_EQ(walked, h.snapshot());
  for (size_t past : {capacity, capacity + 1, capacity + rng.uniform(2, 1u << 20)}) {
    SCOPED_TRACE("offset " + std::to_string(past));
    auto k = h.filled(4, K{0});
    auto v = h.filled(4 * h.dim(), kUntouchedValue);
    auto s = h.filled(4, kUntouchedScore);
    for (size_t n_slots : {size_t{4}, std::numeric_limits<size_t>::max()}) {
      EXPECT_EQ(h->export_batch(past, n_slots, k.data(), v.data(), s.data()), 0u);
    }
    EXPECT_EQ(h.download(k, 4), std::vector<K>(4, K{0}));
    EXPECT_EQ(h.download(v, 4 * h.dim()), std::vector<float>(4 * h.dim(), kUntouchedValue));
    EXPECT_EQ(h.download(s, 4), std::vector<uint64_t>(4, kUntouchedScore));
  }
}

TYPED_TEST(TableOpsTest, ForEachVisitsEveryStoredRow) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  EXPECT_TRUE(h.snapshot_by_for_each().empty());
  const auto keys = random_keys<K>(rng, 700);
  const auto scores = random_scores(rng, keys.size());
  h.insert_or_assign(keys, value_rows(keys, h.dim()), scores);
  h.erase({keys[0], keys[1]});
  Snapshot<K> expected;
  for (size_t i = 2; i < keys.size(); ++i) {
    expected[keys[i]] = Entry{value_row(keys[i], h.dim()), scores[i]};
  }
  EXPECT_EQ(h.snapshot_by_for_each(), expected);
}

TYPED_TEST(TableOpsTest, ReadsChangeNoRowOrScore) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (ScorePolicy policy :
       {ScorePolicy::kTimestamp, ScorePolicy::kStep, ScorePolicy::kLfu, ScorePolicy::kCustomized}) {
    SCOPED_TRACE(to_string(policy));
    auto h = this->make(roomy_options(policy));
    const auto keys = random_keys<K>(rng, 200);
    const std::vector<K> stored(keys.begin(), keys.begin() + 100);
    h->set_score(5);
    h.insert_or_assign(stored, value_rows(stored, h.dim()));
    h->advance_step();
    const Snapshot<K> before = h.snapshot();
    const TableStats stats_before = h->stats();
    h.find(keys);
    h.find_with_misses(keys);
    h.contains(keys);
    h.snapshot(64);
    h.snapshot_by_for_each();
    (void)h->size();
    (void)h->load_factor();
    EXPECT_EQ(h.snapshot(), before);
    EXPECT_EQ(h->size(), stored.size());
    const TableStats stats_after = h->stats();
    EXPECT_EQ(stats_after.evictions, stats_before.evictions);
    EXPECT_EQ(stats_after.refused, stats_before.refused);
  }
}

}  // namespace
}  // namespace dynemb::testing

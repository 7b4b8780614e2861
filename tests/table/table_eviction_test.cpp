// Eviction and refusal at max capacity, and the safe-check modes that decide what a refusal does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "core/warning_capture.hpp"
#include "dynemb/core/error.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableEvictionTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableEvictionTest, AllTableConfigs, TableConfigNames);

// A tiny table whose bucket `bucket` is full of 16 keys with the given scores.
template <TableKey K>
struct FullBucket {
  std::vector<K> keys;
  std::vector<uint64_t> scores;
  uint64_t bucket = 0;
  Snapshot<K> contents(uint32_t dim) const {
    Snapshot<K> out;
    for (size_t i = 0; i < keys.size(); ++i)
      out[keys[i]] = Entry{value_row(keys[i], dim), scores[i]};
    return out;
  }
  // The entry eviction picks: lowest score, then smallest key bit pattern.
  K victim() const {
    size_t best = 0;
    for (size_t i = 1; i < keys.size(); ++i) {
      if (scores[i] < scores[best] ||
          (scores[i] == scores[best] && key_bits(keys[i]) < key_bits(keys[best]))) {
        best = i;
      }
    }
    return keys[best];
  }
  uint64_t lowest_score() const { return *std::min_element(scores.begin(), scores.end()); }
};

template <TableKey K>
FullBucket<K> fill_bucket(TableHarness<K>& h, TestRng& rng, std::vector<uint64_t> scores) {
  FullBucket<K> b;
  b.bucket = rng.uniform(0, h.num_buckets() - 1);
  b.keys = keys_in_bucket<K>(rng, b.bucket, h.num_buckets(), scores.size());
  b.scores = std::move(scores);
  h.insert_or_assign(b.keys, value_rows(b.keys, h.dim()), b.scores);
  EXPECT_EQ(h->size(), b.keys.size());
  return b;
}

std::vector<uint64_t> distinct_scores(TestRng& rng, size_t n, uint64_t lo, uint64_t hi) {
  std::set<uint64_t> s;
  while (s.size() < n) s.insert(rng.uniform(lo, hi));
  std::vector<uint64_t> v(s.begin(), s.end());
  std::shuffle(v.begin(), v.end(), rng.engine());
  return v;
}

// tiny_options() whose initializer draws `kind` rows from a fresh seed.
TableOptions tiny_options_drawing(InitializerKind kind, TestRng& rng) {
  TableOptions o = tiny_options();
  o.initializer.kind = kind;
  o.initializer.seed = rng.next();
  return o;
}

TYPED_TEST(TableEvictionTest, HigherScoreEvictsTheLowestScoreEntry) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options());
  FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
  const K victim = b.victim();
  const uint64_t victim_score = b.lowest_score();
  const K newcomer = keys_in_bucket<K>(rng, b.bucket, h.num_buckets(), 1,
                                       std::set<K>(b.keys.begin(), b.keys.end()))[0];
  const uint64_t score = rng.uniform(victim_score + 1, 5000);
  const RowsResult<K> out =
      h.insert_and_evict({newcomer}, value_rows(std::vector<K>{newcomer}, h.dim(), 9.0f), {score});
  ASSERT_EQ(out.count, 1u);
  EXPECT_EQ(out.as_map(h.dim()),
            (Snapshot<K>{{victim, Entry{value_row(victim, h.dim()), victim_score}}}));
  Snapshot<K> expected = b.contents(h.dim());
  expected.erase(victim);
  expected[newcomer] = Entry{value_row(newcomer, h.dim(), 9.0f), score};
  EXPECT_EQ(h.snapshot(), expected);
  EXPECT_EQ(h->stats().evictions, 1u);
  EXPECT_EQ(h->stats().refused, 0u);
  EXPECT_EQ(h->capacity(), 64u);
}

TYPED_TEST(TableEvictionTest, EqualScoreEvictsAndTiesGoToTheSmallestKey) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options());
  // Half the bucket shares the lowest score.
  std::vector<uint64_t> scores = distinct_scores(rng, 16, 100, 1000);
  for (size_t i = 0; i < 8; ++i) scores[i] = 50;
  FullBucket<K> b = fill_bucket(h, rng, scores);
  std::set<K> used(b.keys.begin(), b.keys.end());
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(round);
    const K victim = b.victim();
    const uint64_t victim_score = b.lowest_score();
    const K newcomer = keys_in_bucket<K>(rng, b.bucket, h.num_buckets(), 1, used)[0];
    used.insert(newcomer);
    const uint64_t score = victim_score;  // equal: may evict
    const RowsResult<K> out =
        h.insert_and_evict({newcomer}, value_rows(std::vector<K>{newcomer}, h.dim()), {score});
    ASSERT_EQ(out.count, 1u);
    EXPECT_EQ(out.keys[0], victim);
    EXPECT_EQ(out.scores[0], victim_score);
    const size_t at = std::find(b.keys.begin(), b.keys.end(), victim) - b.keys.begin();
    b.keys[at] = newcomer;
    b.scores[at] = score;
    EXPECT_EQ(h.snapshot(), b.contents(h.dim()));
  }
  EXPECT_EQ(h->stats().evictions, 12u);
}

TYPED_TEST(TableEvictionTest, LowerScoreIsRefusedAndReturned) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options());
  FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
  const K newcomer = keys_in_bucket<K>(rng, b.bucket, h.num_buckets(), 1,
                                       std::set<K>(b.keys.begin(), b.keys.end()))[0];
  const uint64_t score = rng.uniform(0, b.lowest_score() - 1);
  const RowsResult<K> out =
      h.insert_and_evict({newcomer}, value_rows(std::vector<K>{newcomer}, h.dim(), 3.0f), {score});
  ASSERT_EQ(out.count, 1u);
  EXPECT_EQ(out.as_map(h.dim()),
            (Snapshot<K>{{newcomer, Entry{value_row(newcomer, h.dim(), 3.0f), score}}}));
  EXPECT_EQ(h.snapshot(), b.contents(h.dim()));
  EXPECT_EQ(h->stats().refused, 1u);
  EXPECT_EQ(h->stats().evictions, 0u);
}

TYPED_TEST(TableEvictionTest, InsertAndEvictReturnsEvictedAndRefusedOfOneBatch) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options());
  // Two full buckets (one key in each evicts, one key is refused) and two free inserts.
  FullBucket<K> b1 = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
  FullBucket<K> b2;
  b2.bucket = (b1.bucket + 1) % h.num_buckets();
  b2.scores = distinct_scores(rng, 16, 100, 1000);
  b2.keys = keys_in_bucket<K>(rng, b2.bucket, h.num_buckets(), 16);
  h.insert_or_assign(b2.keys, value_rows(b2.keys, h.dim()), b2.scores);
  const uint64_t free_bucket = (b1.bucket + 2) % h.num_buckets();
  std::set<K> used(b1.keys.begin(), b1.keys.end());
  used.insert(b2.keys.begin(), b2.keys.end());
  const K evictor = keys_in_bucket<K>(rng, b1.bucket, h.num_buckets(), 1, used)[0];
  const K refused = keys_in_bucket<K>(rng, b2.bucket, h.num_buckets(), 1, used)[0];
  const auto free_keys = keys_in_bucket<K>(rng, free_bucket, h.num_buckets(), 2, used);
  const std::vector<K> batch{free_keys[0], evictor, refused, free_keys[1]};
  const std::vector<uint64_t> scores{1, 2000, b2.lowest_score() - 1, 1};
  const std::vector<float> values = value_rows(batch, h.dim(), 5.0f);

  const RowsResult<K> out = h.insert_and_evict(batch, values, scores);
  const K victim = b1.victim();
  EXPECT_EQ(out.as_map(h.dim()),
            (Snapshot<K>{{victim, Entry{value_row(victim, h.dim()), b1.lowest_score()}},
                         {refused, Entry{value_row(refused, h.dim(), 5.0f), scores[2]}}}));
  EXPECT_EQ(h->stats().evictions, 1u);
  EXPECT_EQ(h->stats().refused, 1u);
  EXPECT_EQ(h.contains(batch), (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(h->size(), 34u);
}

TYPED_TEST(TableEvictionTest, InsertAndEvictAcceptsNullValueAndScoreOutputs) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options());
  FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
  const auto newcomers = keys_in_bucket<K>(rng, b.bucket, h.num_buckets(), 1,
                                           std::set<K>(b.keys.begin(), b.keys.end()));
  auto k = h.upload(newcomers);
  auto v = h.upload(value_rows(newcomers, h.dim()));
  auto s = h.upload(std::vector<uint64_t>{5000});
  auto ek = h.filled(1, K{0});
  const size_t count =
      h->insert_and_evict(1, k.data(), v.data(), s.data(), ek.data(), nullptr, nullptr);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(h.download(ek, 1)[0], b.victim());
}

// insert_and_evict_counted without values: the first *count keys go in with the initializer's
// rows (drawn by the table), the victim leaves with its row, a refused key with the initializer's
// row and its score; keys past the count are not touched.
TYPED_TEST(TableEvictionTest, InsertAndEvictCountedWithoutValuesInsertsInitialRows) {
  using K = typename TestFixture::Key;
  TestRng rng;
  const TableOptions o = tiny_options_drawing(InitializerKind::kUniform, rng);
  auto h = this->make(o);
  FullBucket<K> b1 = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
  FullBucket<K> b2;
  b2.bucket = (b1.bucket + 1) % h.num_buckets();
  b2.scores = distinct_scores(rng, 16, 100, 1000);
  b2.keys = keys_in_bucket<K>(rng, b2.bucket, h.num_buckets(), 16);
  h.insert_or_assign(b2.keys, value_rows(b2.keys, h.dim()), b2.scores);
  std::set<K> used(b1.keys.begin(), b1.keys.end());
  used.insert(b2.keys.begin(), b2.keys.end());
  const K evictor = keys_in_bucket<K>(rng, b1.bucket, h.num_buckets(), 1, used)[0];
  const K refused = keys_in_bucket<K>(rng, b2.bucket, h.num_buckets(), 1, used)[0];
  const auto free_keys =
      keys_in_bucket<K>(rng, (b1.bucket + 2) % h.num_buckets(), h.num_buckets(), 2, used);
  // The last key is past the count.
  const std::vector<K> batch{free_keys[0], evictor, refused, free_keys[1]};
  const std::vector<uint64_t> scores{1, 2000, b2.lowest_score() - 1, 1};
  auto k = h.upload(batch);
  auto sc = h.upload(scores);
  auto count = h.upload(std::vector<uint64_t>{3});
  auto ek = h.filled(batch.size(), K{0});
  auto ev = h.filled(batch.size() * h.dim(), 0.0f);
  auto es = h.filled(batch.size(), uint64_t{0});
  auto evicted = h.filled(1, uint64_t{0});
  h->insert_and_evict_counted(batch.size(), count.data(), k.data(), nullptr, sc.data(), ek.data(),
                              ev.data(), es.data(), evicted.data());
  ASSERT_EQ(h.download(evicted, 1)[0], 2u);
  const auto keys_out = h.download(ek, 2);
  const auto rows_out = h.download(ev, 2 * h.dim());
  const auto scores_out = h.download(es, 2);
  Snapshot<K> out;
  for (size_t e = 0; e < 2; ++e)
    out[keys_out[e]] = Entry{row_at(rows_out, e, h.dim()), scores_out[e]};
  const K victim = b1.victim();
  EXPECT_EQ(out, (Snapshot<K>{
                     {victim, Entry{value_row(victim, h.dim()), b1.lowest_score()}},
                     {refused, Entry{initial_row(o.initializer, refused, h.dim()), scores[2]}}}));
  Snapshot<K> want = b1.contents(h.dim());
  const Snapshot<K> second = b2.contents(h.dim());
  want.insert(second.begin(), second.end());
  want.erase(victim);
  want[free_keys[0]] = Entry{initial_row(o.initializer, free_keys[0], h.dim()), scores[0]};
  want[evictor] = Entry{initial_row(o.initializer, evictor, h.dim()), scores[1]};
  EXPECT_EQ(h.snapshot(), want) << "the counted keys with their initial rows, the last untouched";
  EXPECT_EQ(h->stats().evictions, 1u);
  EXPECT_EQ(h->stats().refused, 1u);
}

TYPED_TEST(TableEvictionTest, FindOrInsertGivesARefusedKeyItsInitializerRow) {
  using K = typename TestFixture::Key;
  TestRng rng;
  const TableOptions o = tiny_options_drawing(InitializerKind::kNormal, rng);
  auto h = this->make(o);
  FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
  const K newcomer = keys_in_bucket<K>(rng, b.bucket, h.num_buckets(), 1,
                                       std::set<K>(b.keys.begin(), b.keys.end()))[0];
  const FindResult r = h.find_or_insert({newcomer}, {10});
  EXPECT_FALSE(r.founds[0]);
  EXPECT_EQ(row_at(r.values, 0, h.dim()), initial_row(o.initializer, newcomer, h.dim()));
  EXPECT_EQ(h.snapshot(), b.contents(h.dim()));
  EXPECT_EQ(h->stats().refused, 1u);
}

// True when `text` holds `number` as a whole decimal number.
bool contains_number(const std::string& text, uint64_t number) {
  const std::string digits = std::to_string(number);
  for (size_t at = text.find(digits); at != std::string::npos; at = text.find(digits, at + 1)) {
    const bool left_ok = at == 0 || !std::isdigit(static_cast<unsigned char>(text[at - 1]));
    const size_t end = at + digits.size();
    const bool right_ok =
        end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]));
    if (left_ok && right_ok) return true;
  }
  return false;
}

// The writes that may insert, each called with one batch: `keys` with `scores`.
template <TableKey K>
void call_insert(TableHarness<K>& h, int which, const std::vector<K>& keys,
                 const std::vector<uint64_t>& scores) {
  const std::vector<float> values = value_rows(keys, h.dim(), 1.0f);
  switch (which) {
    case 0:
      h.insert_or_assign(keys, values, scores);
      break;
    case 1:
      h.find_or_insert(keys, scores);
      break;
    case 2:
      h.accum_or_assign(keys, values, scores);
      break;
    case 3:
      h.find_or_insert_given(keys, values, scores);
      break;
    default:
      h.insert_and_evict(keys, values, scores);
      break;
  }
}
constexpr const char* kInsertCalls[] = {"insert_or_assign", "find_or_insert", "accum_or_assign",
                                        "find_or_insert_given", "insert_and_evict"};
constexpr int kInsertCallCount = 5;

// A batch for a tiny table with one full bucket: two accepted keys elsewhere, then two refused.
template <TableKey K>
struct RefusalBatch {
  std::vector<K> keys;
  std::vector<uint64_t> scores;
};

template <TableKey K>
RefusalBatch<K> refusal_batch(TableHarness<K>& h, TestRng& rng, const FullBucket<K>& b) {
  std::set<K> used(b.keys.begin(), b.keys.end());
  const uint64_t other = (b.bucket + 1) % h.num_buckets();
  const auto accepted = keys_in_bucket<K>(rng, other, h.num_buckets(), 2, used);
  const auto refused = keys_in_bucket<K>(rng, b.bucket, h.num_buckets(), 2, used);
  return RefusalBatch<K>{{accepted[0], refused[0], accepted[1], refused[1]}, {500, 1, 500, 2}};
}

TYPED_TEST(TableEvictionTest, ErrorModeAppliesTheBatchThenThrowsInsertRefused) {
  using K = typename TestFixture::Key;
  TestRng rng;
  // insert_and_evict returns its refusals, so only the other inserting calls are checked here.
  for (int which = 0; which < kInsertCallCount - 1; ++which) {
    SCOPED_TRACE(kInsertCalls[which]);
    auto h = this->make(tiny_options(ScorePolicy::kCustomized, SafeCheck::kError));
    FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
    const RefusalBatch<K> batch = refusal_batch(h, rng, b);
    std::string message;
    try {
      call_insert(h, which, batch.keys, batch.scores);
      ADD_FAILURE() << "no InsertRefused";
    } catch (const InsertRefused& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(kInsertCalls[which]), std::string::npos) << message;
    EXPECT_TRUE(contains_number(message, 2)) << "count of refused keys: " << message;
    const K first = batch.keys[1];
    EXPECT_TRUE(message.find(std::to_string(first)) != std::string::npos ||
                message.find(std::to_string(key_bits(first))) != std::string::npos)
        << "first refused key " << first << ": " << message;
    EXPECT_EQ(h.contains(batch.keys), (std::vector<bool>{true, false, true, false}));
    EXPECT_EQ(h->size(), 18u);
    EXPECT_EQ(h->stats().refused, 2u);
  }
}

TYPED_TEST(TableEvictionTest, InsertAndEvictNeverThrowsInsertRefusedItReturnsTheRows) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options(ScorePolicy::kCustomized, SafeCheck::kError));
  FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
  const RefusalBatch<K> batch = refusal_batch(h, rng, b);
  WarningCapture warnings;
  RowsResult<K> out;
  EXPECT_NO_THROW(
      out = h.insert_and_evict(batch.keys, value_rows(batch.keys, h.dim(), 1.0f), batch.scores));
  EXPECT_EQ(warnings.messages().size(), 1u) << "ERROR warns instead of throwing here";
  const std::set<K> returned(out.keys.begin(), out.keys.end());
  EXPECT_EQ(returned, (std::set<K>{batch.keys[1], batch.keys[3]})) << "the refused rows";
  EXPECT_EQ(h.contains(batch.keys), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(h->stats().refused, 2u);
}

TYPED_TEST(TableEvictionTest, WarningModeLogsOncePerCallAndReturns) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (int which = 0; which < kInsertCallCount; ++which) {
    SCOPED_TRACE(kInsertCalls[which]);
    auto h = this->make(tiny_options(ScorePolicy::kCustomized, SafeCheck::kWarning));
    FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
    const RefusalBatch<K> batch = refusal_batch(h, rng, b);
    WarningCapture warnings;
    EXPECT_NO_THROW(call_insert(h, which, batch.keys, batch.scores));
    h->stats();  // the CUDA table logs WARNING reports at a later call or stats() at the latest
    EXPECT_EQ(warnings.messages().size(), 1u);
    EXPECT_EQ(h.contains(batch.keys), (std::vector<bool>{true, false, true, false}));
    EXPECT_EQ(h->stats().refused, 2u);
  }
}

TYPED_TEST(TableEvictionTest, IgnoreModeOnlyCounts) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (int which = 0; which < kInsertCallCount; ++which) {
    SCOPED_TRACE(kInsertCalls[which]);
    auto h = this->make(tiny_options(ScorePolicy::kCustomized, SafeCheck::kIgnore));
    FullBucket<K> b = fill_bucket(h, rng, distinct_scores(rng, 16, 100, 1000));
    const RefusalBatch<K> batch = refusal_batch(h, rng, b);
    WarningCapture warnings;
    EXPECT_NO_THROW(call_insert(h, which, batch.keys, batch.scores));
    EXPECT_TRUE(warnings.messages().empty());
    EXPECT_EQ(h.contains(batch.keys), (std::vector<bool>{true, false, true, false}));
    EXPECT_EQ(h->stats().refused, 2u);
  }
}

TYPED_TEST(TableEvictionTest, LfuNewKeyEvictsOnlyAnEntryOfCountAtMostItsIncrement) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options(ScorePolicy::kLfu));
  const uint64_t bucket = rng.uniform(0, h.num_buckets() - 1);
  const auto keys = keys_in_bucket<K>(rng, bucket, h.num_buckets(), 18);
  const std::vector<K> residents(keys.begin(), keys.begin() + 16);
  // Every resident has a count of 2.
  h.insert_or_assign(residents, value_rows(residents, h.dim()));
  h.find_or_insert(residents);
  // A new key of count 1 is refused; one of count 2 evicts the smallest key (all tie at 2).
  h.find_or_insert({keys[16]});
  EXPECT_EQ(h->stats().refused, 1u);
  EXPECT_FALSE(h.contains({keys[16]})[0]);
  const RowsResult<K> out =
      h.insert_and_evict({keys[17]}, value_rows(std::vector<K>{keys[17]}, h.dim()), {2});
  ASSERT_EQ(out.count, 1u);
  EXPECT_EQ(key_bits(out.keys[0]),
            key_bits(*std::min_element(residents.begin(), residents.end(),
                                       [](K a, K b) { return key_bits(a) < key_bits(b); })));
  EXPECT_EQ(out.scores[0], 2u);
  EXPECT_TRUE(h.contains({keys[17]})[0]);
}

}  // namespace
}  // namespace dynemb::testing

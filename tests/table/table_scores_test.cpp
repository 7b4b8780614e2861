// Score policies: what each write stores under TIMESTAMP, STEP, LFU and CUSTOMIZED.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "core/warning_capture.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableScoresTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableScoresTest, AllTableConfigs, TableConfigNames);

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The stored score of every key (a missing key fails the test).
template <TableKey K>
std::vector<uint64_t> scores_of(TableHarness<K>& h, const std::vector<K>& keys) {
  const FindResult r = h.find(keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(r.founds[i]) << "key " << keys[i];
  return r.scores;
}

TYPED_TEST(TableScoresTest, TimestampStoresNanosecondsSinceEpoch) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options(ScorePolicy::kTimestamp));
  const auto keys = random_keys<K>(rng, 50);
  const uint64_t before = now_ns();
  h.insert_or_assign(keys, value_rows(keys, h.dim()), std::vector<uint64_t>(keys.size(), 7));
  const uint64_t after = now_ns();
  // The CPU reads the same clock; the device timer may differ from it by a little.
  const uint64_t slack = this->kBackend == Backend::kCpu ? 0 : 10'000'000'000ull;
  const std::vector<uint64_t> first = scores_of(h, keys);
  for (uint64_t s : first) {
    EXPECT_GE(s, before - slack);
    EXPECT_LE(s, after + slack);
  }
  if (this->kBackend == Backend::kCpu) {
    EXPECT_GE(h->score(), before);
    EXPECT_LE(h->score(), after);
  }
  // A later write stores a later time.
  h.assign(keys, value_rows(keys, h.dim(), 1.0f));
  const std::vector<uint64_t> second = scores_of(h, keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_GE(second[i], first[i]) << i;
}

TYPED_TEST(TableScoresTest, StepStoresTheStepOnEveryWrite) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options(ScorePolicy::kStep));
  h->set_score(41);
  EXPECT_EQ(h->score(), 41u);
  h->advance_step();
  EXPECT_EQ(h->score(), 42u);
  const auto keys = random_keys<K>(rng, 60);
  const std::vector<uint64_t> ignored(keys.size(), 999);
  h.insert_or_assign(keys, value_rows(keys, h.dim()), ignored);
  EXPECT_EQ(scores_of(h, keys), std::vector<uint64_t>(keys.size(), 42));

  // Each write on existing keys stores the current step; the scores argument is ignored.
  const std::vector<K> sub(keys.begin(), keys.begin() + 10);
  const std::vector<uint64_t> sub_ignored(sub.size(), 999);
  uint64_t step = 42;
  auto expect_step = [&](const char* call) {
    SCOPED_TRACE(call);
    EXPECT_EQ(scores_of(h, sub), std::vector<uint64_t>(sub.size(), step));
  };
  h->advance_step();
  ++step;
  h.find_or_insert(sub, sub_ignored);
  expect_step("find_or_insert");
  h->advance_step();
  ++step;
  h.assign(sub, value_rows(sub, h.dim()), sub_ignored);
  expect_step("assign");
  h->advance_step();
  ++step;
  h.accum_or_assign(sub, value_rows(sub, h.dim()), sub_ignored);
  expect_step("accum_or_assign");
  h->advance_step();
  ++step;
  h.insert_and_evict(sub, value_rows(sub, h.dim()), sub_ignored);
  expect_step("insert_and_evict");
  h->set_score(1000);
  step = 1000;
  h.insert_or_assign(sub, value_rows(sub, h.dim()));
  expect_step("insert_or_assign after set_score");
  // New keys through find_or_insert get the step too.
  const auto fresh = random_keys<K>(rng, 10, std::set<K>(keys.begin(), keys.end()));
  h.find_or_insert(fresh);
  EXPECT_EQ(scores_of(h, fresh), std::vector<uint64_t>(fresh.size(), 1000));
}

TYPED_TEST(TableScoresTest, LfuCountsTouchesWithIncrements) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options(ScorePolicy::kLfu));
  const auto keys = random_keys<K>(rng, 40);
  const std::vector<K> a(keys.begin(), keys.begin() + 20);  // touched without increments
  const std::vector<K> b(keys.begin() + 20, keys.end());    // touched with increments
  std::vector<uint64_t> inc(b.size());
  for (auto& x : inc) x = rng.uniform(1, 1000);

  h.find_or_insert(a);                                 // new: 1
  h.insert_or_assign(b, value_rows(b, h.dim()), inc);  // new: inc
  EXPECT_EQ(scores_of(h, a), std::vector<uint64_t>(a.size(), 1));
  EXPECT_EQ(scores_of(h, b), inc);

  std::vector<uint64_t> expected_b = inc;
  auto add_inc = [&] {
    for (size_t i = 0; i < b.size(); ++i) expected_b[i] += inc[i];
  };
  h.find_or_insert(a);                            // 2
  h.assign(a, value_rows(a, h.dim()));            // 3
  h.accum_or_assign(a, value_rows(a, h.dim()));   // 4
  h.insert_and_evict(a, value_rows(a, h.dim()));  // 5
  h.insert_or_assign(a, value_rows(a, h.dim()));  // 6
  h.find_or_insert(b, inc);
  add_inc();
  h.assign(b, value_rows(b, h.dim()), inc);
  add_inc();
  h.accum_or_assign(b, value_rows(b, h.dim()), inc);
  add_inc();
  h.insert_and_evict(b, value_rows(b, h.dim()), inc);
  add_inc();
  EXPECT_EQ(scores_of(h, a), std::vector<uint64_t>(a.size(), 6));
  EXPECT_EQ(scores_of(h, b), expected_b);
}

TYPED_TEST(TableScoresTest, LfuSaturatesAtTheLargestScore) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options(ScorePolicy::kLfu));
  const auto keys = random_keys<K>(rng, 8);
  h.insert_or_assign(keys, value_rows(keys, h.dim()));
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  h.assign_scores(keys, std::vector<uint64_t>(keys.size(), kMax - 3));
  h.assign(keys, value_rows(keys, h.dim()), std::vector<uint64_t>(keys.size(), 10));
  EXPECT_EQ(scores_of(h, keys), std::vector<uint64_t>(keys.size(), kMax));
  h.find_or_insert(keys);
  EXPECT_EQ(scores_of(h, keys), std::vector<uint64_t>(keys.size(), kMax));
}

TYPED_TEST(TableScoresTest, CustomizedStoresPerKeyOrCallLevelScores) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options(ScorePolicy::kCustomized));
  const auto keys = random_keys<K>(rng, 60);
  const std::vector<K> given(keys.begin(), keys.begin() + 30);
  const std::vector<K> call_level(keys.begin() + 30, keys.end());
  std::vector<uint64_t> scores(given.size());
  for (auto& s : scores) s = rng.uniform(0, 1ull << 40);
  h.insert_or_assign(given, value_rows(given, h.dim()), scores);
  EXPECT_EQ(scores_of(h, given), scores);

  h->set_score(777);
  EXPECT_EQ(h->score(), 777u);
  h.find_or_insert(call_level);
  EXPECT_EQ(scores_of(h, call_level), std::vector<uint64_t>(call_level.size(), 777));

  // Existing keys take the new score, given or call-level; it may also go down per key.
  for (auto& s : scores) s = rng.uniform(0, 100);
  h.find_or_insert(given, scores);
  EXPECT_EQ(scores_of(h, given), scores);
  h->set_score(900);
  h.accum_or_assign(given, value_rows(given, h.dim()));
  EXPECT_EQ(scores_of(h, given), std::vector<uint64_t>(given.size(), 900));
  h.assign(call_level, value_rows(call_level, h.dim()), std::vector<uint64_t>(30, 5));
  EXPECT_EQ(scores_of(h, call_level), std::vector<uint64_t>(call_level.size(), 5));
}

TYPED_TEST(TableScoresTest, CustomizedScoreGoingBackwardsWarns) {
  auto h = this->make(roomy_options(ScorePolicy::kCustomized));
  WarningCapture warnings;
  h->set_score(100);
  h->set_score(200);
  EXPECT_TRUE(warnings.messages().empty());
  h->set_score(150);
  EXPECT_EQ(warnings.messages().size(), 1u);
  EXPECT_EQ(h->score(), 150u);
}

}  // namespace
}  // namespace dynemb::testing

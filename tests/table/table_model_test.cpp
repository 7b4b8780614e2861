// Randomized model test: long runs of mixed batch operations checked call by call against
// ReferenceTable (a std::unordered_map model that predicts every eviction and refusal).
#include <gtest/gtest.h>

#include "core/warning_capture.hpp"
#include "table/reference_table.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableModelTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableModelTest, AllTableConfigs, TableConfigNames);

// One randomized run: `batches` mixed calls on a table of `options`.
template <TableKey K>
class ModelRun {
 public:
  ModelRun(TableHarness<K>& table, const TableOptions& options, TestRng& rng, size_t universe)
      : t_(table),
        o_(options),
        rng_(rng),
        fixed_(options.init_capacity == options.max_capacity),
        model_(options, fixed_ ? options.max_capacity / options.bucket_capacity : 0),
        universe_(random_keys<K>(rng, universe)) {}

  void run(size_t batches) {
    for (size_t b = 0; b < batches; ++b) {
      step(b);
      if (::testing::Test::HasFatalFailure() || failures() > 20) return;
      if (b % 1000 == 999) check_contents();
    }
    check_contents();
  }

 private:
  int failures() const {
    return ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
  }

  // Keys for one batch: distinct, and (at fixed capacity) in distinct buckets, so the outcome
  // does not depend on the order the backend applies the batch in.
  std::vector<K> batch_keys() {
    const uint64_t buckets = o_.max_capacity / o_.bucket_capacity;
    const size_t n = rng_.uniform(1, fixed_ ? buckets * 3 / 4 : 200);
    std::set<K> keys;
    std::set<uint64_t> used;
    std::vector<K> out;
    for (size_t tries = 0; out.size() < n && tries < 8 * n; ++tries) {
      const K key = universe_[rng_.uniform(0, universe_.size() - 1)];
      if (keys.count(key)) continue;
      if (fixed_ && !used.insert(bucket_of_key(key, buckets)).second) continue;
      keys.insert(key);
      out.push_back(key);
    }
    return out;
  }

  std::vector<float> random_rows(size_t n) {
    std::vector<float> v(n * o_.dim);
    for (auto& x : v) x = static_cast<float>(static_cast<int>(rng_.uniform(0, 64)) - 32) * 0.25f;
    return v;
  }

  // Per-key scores (CUSTOMIZED: a score, LFU: an increment), or none.
  std::vector<uint64_t> random_scores(size_t n) {
    if (rng_.chance(0.3)) return {};
    std::vector<uint64_t> s(n);
    const uint64_t hi = o_.score_policy == ScorePolicy::kLfu ? 3 : 1000;
    for (auto& x : s) x = rng_.uniform(o_.score_policy == ScorePolicy::kLfu ? 1 : 0, hi);
    return s;
  }

  static std::optional<uint64_t> given(const std::vector<uint64_t>& s, size_t i) {
    return s.empty() ? std::nullopt : std::optional<uint64_t>(s[i]);
  }

  void step(size_t b) {
    SCOPED_TRACE("batch " + std::to_string(b));
    if (rng_.chance(0.05)) {
      if (o_.score_policy == ScorePolicy::kStep) {
        t_->advance_step();
        ++model_.clock;
      } else if (o_.score_policy == ScorePolicy::kCustomized) {
        model_.clock = rng_.uniform(0, 1000);
        t_->set_score(model_.clock);
      }
    }
    const std::vector<K> keys = batch_keys();
    const size_t n = keys.size();
    const uint32_t dim = o_.dim;
    const int op = static_cast<int>(rng_.uniform(0, 99));
    if (op < 12) {  // find
      const FindResult r = t_.find(keys);
      for (size_t i = 0; i < n; ++i) {
        const Entry* e = model_.find(keys[i]);
        ASSERT_EQ(r.founds[i], e != nullptr) << "find, key " << keys[i];
        if (e) {
          EXPECT_EQ(row_at(r.values, i, dim), e->row) << "find, key " << keys[i];
          EXPECT_EQ(r.scores[i], e->score) << "find, key " << keys[i];
        }
      }
    } else if (op < 17) {  // find_with_misses
      const MissResult<K> r = t_.find_with_misses(keys);
      std::vector<K> missed;
      for (size_t i = 0; i < n; ++i) {
        const Entry* e = model_.find(keys[i]);
        if (!e) {
          missed.push_back(keys[i]);
        } else {
          EXPECT_EQ(row_at(r.values, i, dim), e->row) << "find_with_misses, key " << keys[i];
        }
      }
      EXPECT_EQ(r.missed_keys, missed);
    } else if (op < 25) {  // contains
      const std::vector<bool> r = t_.contains(keys);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(r[i], model_.contains(keys[i])) << "contains, key " << keys[i];
      }
    } else if (op < 35) {  // find_or_insert_given
      const std::vector<float> values = random_rows(n);
      const std::vector<uint64_t> scores = random_scores(n);
      const FindResult r = t_.find_or_insert_given(keys, values, scores);
      for (size_t i = 0; i < n; ++i) {
        const bool existed = model_.contains(keys[i]);
        const Row row = row_at(values, i, dim);
        model_.write(keys[i], std::nullopt, row, given(scores, i));
        const Entry* e = model_.find(keys[i]);
        ASSERT_EQ(r.founds[i], existed) << "find_or_insert_given, key " << keys[i];
        EXPECT_EQ(row_at(r.values, i, dim), e ? e->row : row)
            << "find_or_insert_given, key " << keys[i];
      }
    } else if (op < 41) {  // find_or_insert
      const std::vector<uint64_t> scores = random_scores(n);
      const FindResult r = t_.find_or_insert(keys, scores);
      for (size_t i = 0; i < n; ++i) {
        const bool existed = model_.contains(keys[i]);
        const Row init = initial_row(o_.initializer, keys[i], dim);
        model_.write(keys[i], std::nullopt, init, given(scores, i));
        const Entry* e = model_.find(keys[i]);
        ASSERT_EQ(r.founds[i], existed) << "find_or_insert, key " << keys[i];
        EXPECT_EQ(row_at(r.values, i, dim), e ? e->row : init) << "find_or_insert, key " << keys[i];
      }
    } else if (op < 55) {  // insert_or_assign
      const std::vector<float> values = random_rows(n);
      const std::vector<uint64_t> scores = random_scores(n);
      t_.insert_or_assign(keys, values, scores);
      for (size_t i = 0; i < n; ++i) {
        const Row row = row_at(values, i, dim);
        model_.write(keys[i], row, row, given(scores, i));
      }
    } else if (op < 70) {  // insert_and_evict
      const std::vector<float> values = random_rows(n);
      const std::vector<uint64_t> scores = random_scores(n);
      const RowsResult<K> r = t_.insert_and_evict(keys, values, scores);
      Snapshot<K> expected;
      for (size_t i = 0; i < n; ++i) {
        const Row row = row_at(values, i, dim);
        const auto w = model_.write(keys[i], row, row, given(scores, i));
        if (w.outcome == ReferenceTable<K>::Outcome::kEvicted) expected[w.victim] = w.victim_entry;
        if (w.outcome == ReferenceTable<K>::Outcome::kRefused)
          expected[keys[i]] = Entry{row, w.score};
      }
      EXPECT_EQ(r.as_map(dim), expected) << "insert_and_evict";
    } else if (op < 77) {  // assign
      const std::vector<float> values = random_rows(n);
      const std::vector<uint64_t> scores = random_scores(n);
      t_.assign(keys, values, scores);
      for (size_t i = 0; i < n; ++i) {
        if (model_.contains(keys[i])) {
          const Row row = row_at(values, i, dim);
          model_.write(keys[i], row, row, given(scores, i));
        }
      }
    } else if (op < 80) {  // assign_scores
      std::vector<uint64_t> scores(n);
      for (auto& s : scores) s = rng_.uniform(0, 1000);
      t_.assign_scores(keys, scores);
      for (size_t i = 0; i < n; ++i) model_.set_score_of(keys[i], scores[i]);
    } else if (op < 91) {  // accum_or_assign
      const std::vector<float> values = random_rows(n);
      const std::vector<uint64_t> scores = random_scores(n);
      t_.accum_or_assign(keys, values, scores);
      for (size_t i = 0; i < n; ++i) {
        Row row = row_at(values, i, dim);
        if (const Entry* e = model_.find(keys[i])) {
          for (uint32_t j = 0; j < dim; ++j) row[j] = e->row[j] + row[j];
        }
        model_.write(keys[i], row, row, given(scores, i));
      }
    } else if (op < 99) {  // erase
      t_.erase(keys);
      for (K key : keys) model_.erase(key);
    } else {  // erase_if, with a threshold that removes a few keys
      const ScorePredicate p{static_cast<ScoreCompare>(rng_.uniform(0, 4)),
                             rng_.uniform(0, o_.score_policy == ScorePolicy::kLfu ? 3 : 60)};
      const ScorePredicate safe =
          (p.compare == ScoreCompare::kGreater || p.compare == ScoreCompare::kGreaterEqual)
              ? ScorePredicate{ScoreCompare::kEqual, p.threshold}
              : p;
      EXPECT_EQ(t_->erase_if(safe), model_.erase_if(safe)) << "erase_if";
    }
    const TableStats s = t_->stats();
    ASSERT_EQ(s.evictions, model_.evictions) << "op " << op;
    ASSERT_EQ(s.refused, model_.refused) << "op " << op;
    ASSERT_EQ(s.erased, model_.erased) << "op " << op;
    ASSERT_EQ(t_->size(), model_.rows().size()) << "op " << op;
  }

  void check_contents() {
    EXPECT_EQ(t_.snapshot(o_.bucket_capacity * 3), model_.snapshot());
    if (!fixed_) {
      EXPECT_EQ(t_->stats().evictions, 0u);
      EXPECT_EQ(t_->stats().refused, 0u);
    }
  }

  TableHarness<K>& t_;
  TableOptions o_;
  TestRng& rng_;
  bool fixed_;
  ReferenceTable<K> model_;
  std::vector<K> universe_;
};

TableOptions model_options(ScorePolicy policy, bool fixed, uint64_t seed) {
  TableOptions o;
  o.dim = 3;
  o.bucket_capacity = 16;
  o.init_capacity = fixed ? 2048 : 256;
  o.max_capacity = fixed ? 2048 : 16384;
  o.max_load_factor = fixed ? 1.0 : 0.5;
  o.score_policy = policy;
  o.safe_check = SafeCheck::kIgnore;
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = seed;
  return o;
}

TYPED_TEST(TableModelTest, CustomizedScoresWithEvictionsMatchTheModel) {
  using K = typename TestFixture::Key;
  TestRng rng;
  WarningCapture quiet;  // call-level scores go backwards on purpose
  const TableOptions o = model_options(ScorePolicy::kCustomized, true, rng.next());
  auto h = this->make(o);
  ModelRun<K>(h, o, rng, 6000).run(40000);
  EXPECT_GT(h->stats().evictions, 1000u);
  EXPECT_GT(h->stats().refused, 100u);
}

TYPED_TEST(TableModelTest, LfuScoresWithEvictionsMatchTheModel) {
  using K = typename TestFixture::Key;
  TestRng rng;
  const TableOptions o = model_options(ScorePolicy::kLfu, true, rng.next());
  auto h = this->make(o);
  ModelRun<K>(h, o, rng, 6000).run(40000);
  EXPECT_GT(h->stats().evictions, 1000u);
}

TYPED_TEST(TableModelTest, StepScoresWithGrowthMatchTheModel) {
  using K = typename TestFixture::Key;
  TestRng rng;
  const TableOptions o = model_options(ScorePolicy::kStep, false, rng.next());
  auto h = this->make(o);
  ModelRun<K>(h, o, rng, 3000).run(20000);
  EXPECT_GT(h->stats().rehashes, 0u);
}

}  // namespace
}  // namespace dynemb::testing

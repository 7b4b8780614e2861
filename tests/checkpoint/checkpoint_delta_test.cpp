// Incremental dumps: in memory (rows with score >= threshold) and as delta checkpoints that,
// loaded on top of a full one, equal the later full dump.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint_test_util.hpp"
#include "core/warning_capture.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"

namespace dynemb::testing {
namespace {

using checkpoint::named;

template <class K>
class CheckpointDelta : public ::testing::Test {};
using KeyTypes = ::testing::Types<int64_t, uint64_t>;
TYPED_TEST_SUITE(CheckpointDelta, KeyTypes);

// Training steps: each touches a random subset of the known keys and inserts some new ones.
template <TableKey K>
void run_steps(Table<K>& table, TestRng& rng, std::vector<K>& keys, int steps) {
  for (int s = 0; s < steps; ++s) {
    table.advance_step();
    std::vector<K> touched;
    for (K k : keys) {
      if (rng.chance(0.2)) touched.push_back(k);
    }
    if (!touched.empty()) overwrite_random(table, rng, touched);
    const std::vector<K> fresh = fill_random(table, rng, rng.uniform(0, 200), false);
    keys.insert(keys.end(), fresh.begin(), fresh.end());
  }
}

TYPED_TEST(CheckpointDelta, InMemoryRowsMatchTheReference) {
  using K = TypeParam;
  TestRng rng;
  for (ScorePolicy policy : {ScorePolicy::kStep, ScorePolicy::kLfu, ScorePolicy::kCustomized}) {
    SCOPED_TRACE(to_string(policy));
    auto table = make_table<K>(Backend::kCpu, small_table_options(5, policy));
    fill_random(*table, rng, rng.uniform(0, 3000), true);
    if (policy != ScorePolicy::kLfu) table->set_score(rng.uniform(1, 1000));
    const Snapshot<K> all = snapshot(*table);
    const uint64_t threshold = rng.chance(0.1) ? 0 : rng.uniform(0, uint64_t(1) << 40);
    const auto delta = checkpoint::incremental_dump(*table, threshold, rng.uniform(1, 3000));
    Snapshot<K> got;
    ASSERT_EQ(delta.values.size(), delta.keys.size() * delta.dim);
    for (size_t i = 0; i < delta.keys.size(); ++i) {
      got[delta.keys[i]] = StoredRow{std::vector<float>(delta.values.begin() + i * delta.dim,
                                                        delta.values.begin() + (i + 1) * delta.dim),
                                     delta.scores[i]};
    }
    Snapshot<K> want;
    for (const auto& [k, row] : all) {
      if (row.score >= threshold) want[k] = row;
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(delta.next_threshold, policy == ScorePolicy::kLfu ? threshold : table->score());
  }
}

TYPED_TEST(CheckpointDelta, DeltaOnTopOfFullEqualsTheLaterFull) {
  using K = TypeParam;
  TestRng rng;
  TempDir dir;
  const uint32_t dim = static_cast<uint32_t>(rng.uniform(1, 16));
  auto table = make_table<K>(Backend::kCpu, small_table_options(dim, ScorePolicy::kStep));
  std::vector<K> keys = fill_random(*table, rng, 500, false);
  run_steps(*table, rng, keys, 5);
  const auto full = checkpoint::dump(dir / "full", {named("t", *table)});
  const uint64_t next = full.manifest.tables.at(0).next_min_score.value();
  EXPECT_EQ(next, table->score());
  run_steps(*table, rng, keys, static_cast<int>(rng.uniform(1, 4)));

  checkpoint::DumpOptions delta_options;
  delta_options.min_score = next;
  const auto delta = checkpoint::dump(dir / "delta", {named("t", *table)}, delta_options);
  EXPECT_TRUE(delta.manifest.delta);
  EXPECT_LT(delta.rows, table->size());  // only what changed since the full dump
  checkpoint::dump(dir / "later", {named("t", *table)});

  auto restored = make_table<K>(Backend::kCpu, small_table_options(dim, ScorePolicy::kStep));
  checkpoint::load(dir / "full", {named("t", *restored)});
  checkpoint::load(dir / "delta", {named("t", *restored)});
  auto later = make_table<K>(Backend::kCpu, small_table_options(dim, ScorePolicy::kStep));
  checkpoint::load(dir / "later", {named("t", *later)});
  EXPECT_EQ(snapshot(*restored), snapshot(*later));
  EXPECT_EQ(snapshot(*restored), snapshot(*table));
  EXPECT_EQ(restored->score(), table->score());
}

// get_score / set_score through a named table; a CUSTOMIZED score going backwards warns.
TYPED_TEST(CheckpointDelta, ScoreAccessors) {
  using K = TypeParam;
  TestRng rng;
  auto table = make_table<K>(Backend::kCpu, small_table_options(2, ScorePolicy::kCustomized));
  const auto t = named("t", *table);
  const uint64_t s = rng.uniform(10, 1000);
  checkpoint::set_score(t, s);
  EXPECT_EQ(checkpoint::get_score(t), s);
  WarningCapture warnings;
  checkpoint::set_score(t, s - rng.uniform(1, 9));
  EXPECT_EQ(warnings.messages().size(), 1u);
}

}  // namespace
}  // namespace dynemb::testing

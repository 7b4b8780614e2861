// Grouped writes (the batch sorted by bucket, each bucket written by one tile in batch order)
// make a call equal to applying its keys one by one in batch order, even where the contract
// leaves the order open: copies of a key, and several new keys for one full bucket at max
// capacity. Checked call by call against ReferenceTable applied in batch order.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/initializer.hpp"
#include "table/cuda/cuda_test_util.hpp"
#include "table/reference_table.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

using K = int64_t;

TableOptions grouped_options(TestRng& rng, uint32_t dim) {
  TableOptions o;
  o.dim = dim;
  o.bucket_capacity = 16;
  o.init_capacity = o.max_capacity = 16 * 32;
  o.max_load_factor = 1.0;
  o.score_policy = ScorePolicy::kCustomized;
  o.safe_check = SafeCheck::kIgnore;
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = rng.next();
  o.grouped_write_min_batch = 0;
  return o;
}

// A batch drawn with replacement from a small universe: copies of keys and many keys per bucket.
std::vector<K> batch_with_copies(TestRng& rng, const std::vector<K>& universe, size_t n) {
  std::vector<K> keys(n);
  for (auto& k : keys) k = universe[rng.uniform(0, universe.size() - 1)];
  return keys;
}

TEST(CudaGroupedWrites, EveryCallEqualsItsBatchAppliedInOrder) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  const uint32_t dim = 4;
  const TableOptions o = grouped_options(rng, dim);
  TableHarness<K> table(Backend::kCuda, o);
  ReferenceTable<K> model(o, o.max_capacity / o.bucket_capacity);
  const std::vector<K> universe = random_keys<K>(rng, 2000);
  auto random_rows = [&](size_t n) {
    std::vector<float> v(n * dim);
    for (auto& x : v) x = static_cast<float>(rng.uniform(0, 1 << 20)) / 64.0f;
    return v;
  };
  uint64_t clock = 1;
  for (int call = 0; call < 120; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    // The clock moves forward now and then, so newer keys may evict older ones.
    if (rng.uniform(0, 2) == 0) clock += rng.uniform(1, 3);
    table->set_score(clock);
    model.clock = clock;
    const std::vector<K> keys = batch_with_copies(rng, universe, rng.uniform(1, 700));
    const size_t n = keys.size();
    const std::vector<float> values = random_rows(n);
    switch (call % 3) {
      case 0: {
        table.insert_or_assign(keys, values);
        for (size_t i = 0; i < n; ++i) {
          const Row row = row_at(values, i, dim);
          model.write(keys[i], row, row, std::nullopt);
        }
        break;
      }
      case 1: {
        const RowsResult<K> r = table.insert_and_evict(keys, values);
        std::multiset<std::tuple<K, Row, uint64_t>> expected, got;
        for (size_t i = 0; i < n; ++i) {
          const Row row = row_at(values, i, dim);
          const auto w = model.write(keys[i], row, row, std::nullopt);
          if (w.outcome == ReferenceTable<K>::Outcome::kEvicted)
            expected.emplace(w.victim, w.victim_entry.row, w.victim_entry.score);
          if (w.outcome == ReferenceTable<K>::Outcome::kRefused)
            expected.emplace(keys[i], row, w.score);
        }
        for (size_t i = 0; i < r.count; ++i)
          got.emplace(r.keys[i], row_at(r.values, i, dim), r.scores[i]);
        EXPECT_EQ(got, expected) << "insert_and_evict's evicted and refused entries";
        break;
      }
      default: {
        const FindResult r = table.find_or_insert(keys);
        for (size_t i = 0; i < n; ++i) {
          Row initial(dim);
          fill_initial_row(o.initializer, key_bits(keys[i]), initial.data(), dim);
          const Entry* before = model.find(keys[i]);
          const Row expected_row = before != nullptr ? before->row : initial;
          model.write(keys[i], std::nullopt, initial, std::nullopt);
          EXPECT_EQ(r.founds[i], before != nullptr) << "key " << keys[i] << " at " << i;
          EXPECT_EQ(row_at(r.values, i, dim), expected_row) << "key " << keys[i] << " at " << i;
        }
        break;
      }
    }
    ASSERT_EQ(table.snapshot(), model.snapshot());
    const TableStats s = table->stats();
    EXPECT_EQ(s.evictions, model.evictions);
    EXPECT_EQ(s.refused, model.refused);
  }
  EXPECT_GT(model.evictions, 0u);
}

// accum_or_assign adds every copy of a key, in batch order, onto the row the key had (or
// starts it from the first copy's row when new).
TEST(CudaGroupedWrites, AccumulationAddsEveryCopyInBatchOrder) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  const uint32_t dim = 8;
  TableOptions o = grouped_options(rng, dim);
  o.init_capacity = o.max_capacity = 16 * 256;  // roomy: nothing is evicted
  TableHarness<K> table(Backend::kCuda, o);
  std::map<K, Row> model;
  const std::vector<K> universe = random_keys<K>(rng, 300);
  for (int call = 0; call < 20; ++call) {
    const std::vector<K> keys = batch_with_copies(rng, universe, rng.uniform(1, 2000));
    std::vector<float> values(keys.size() * dim);
    for (auto& x : values) x = static_cast<float>(rng.uniform(0, 4096)) / 16.0f - 128.0f;
    table.accum_or_assign(keys, values);
    for (size_t i = 0; i < keys.size(); ++i) {
      const Row row = row_at(values, i, dim);
      auto [it, fresh] = model.emplace(keys[i], row);
      if (!fresh) {
        for (uint32_t j = 0; j < dim; ++j) it->second[j] = it->second[j] + row[j];
      }
    }
  }
  const Snapshot<K> got = table.snapshot();
  ASSERT_EQ(got.size(), model.size());
  for (const auto& [key, row] : model) ASSERT_EQ(got.at(key).row, row) << "key " << key;
}

}  // namespace
}  // namespace dynemb::testing

// The CUDA write kernels under the load the benchmark puts on them: a table at load factor 1
// (every new key evicts), large batches mixing present keys, new keys and copies of both, every
// writing operation in turn. After each call: no key stored twice, size() equal to the keys
// stored, and every stored row exactly the row its key was last given (no torn rows). Rows of 8
// floats and of 64 (8-thread tiles on a full table, where find_or_insert copies the stored row
// out).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing {
namespace {

// The row key k is given in round r: every element names both, so a torn row shows.
std::vector<float> row_for(uint64_t key, uint32_t round, uint32_t dim) {
  std::vector<float> row(dim);
  for (uint32_t j = 0; j < dim; ++j)
    row[j] = static_cast<float>((key % 100003) + j) + 0.5f * static_cast<float>(round % 4);
  return row;
}

// Every stored key with its row; fails on a key stored twice.
std::map<uint64_t, std::vector<float>> contents(Table<uint64_t>& table) {
  std::map<uint64_t, std::vector<float>> out;
  table.for_each([&](uint64_t key, std::span<const float> row, uint64_t) {
    const bool fresh = out.emplace(key, std::vector<float>(row.begin(), row.end())).second;
    EXPECT_TRUE(fresh) << "key " << key << " stored twice";
  });
  return out;
}

// One run of 12 mixed calls on rows of `dim` floats; `grouped_min` is the table's
// grouped_write_min_batch.
void run_full_load(uint64_t grouped_min, uint32_t dim) {
  TestRng rng;
  TableOptions o;
  o.dim = dim;
  o.init_capacity = o.max_capacity = uint64_t{1} << 18;
  o.bucket_capacity = 128;
  o.max_load_factor = 1.0;
  o.score_policy = ScorePolicy::kTimestamp;
  o.safe_check = SafeCheck::kIgnore;
  o.grouped_write_min_batch = grouped_min;
  auto table = make_table<uint64_t>(Backend::kCuda, o);

  std::set<uint64_t> issued;
  auto fresh_keys = [&](size_t n) {
    std::vector<uint64_t> keys;
    while (keys.size() < n) {
      const uint64_t k = rng.next() >> 1;
      if (issued.insert(k).second) keys.push_back(k);
    }
    return keys;
  };
  std::map<uint64_t, uint32_t> last_round;  // the round of each key's last stored row
  const size_t batch = 200000;
  for (uint32_t round = 0; round < 12; ++round) {
    const auto stored = contents(*table);
    ASSERT_EQ(table->size(), stored.size()) << "round " << round;
    for (const auto& [key, row] : stored) {
      ASSERT_EQ(row, row_for(key, last_round.at(key), dim)) << "key " << key << " round " << round;
    }
    // 60% present keys (when there are enough), 40% new, then 10% copies of both.
    std::vector<uint64_t> present;
    for (const auto& [key, row] : stored) present.push_back(key);
    std::shuffle(present.begin(), present.end(), rng.engine());
    std::vector<uint64_t> keys(present.begin(),
                               present.begin() + std::min(present.size(), batch * 6 / 10));
    const auto added = fresh_keys(batch - keys.size());
    keys.insert(keys.end(), added.begin(), added.end());
    const size_t distinct = keys.size();
    for (size_t c = 0; c < distinct / 10; ++c) keys.push_back(keys[rng.uniform(0, distinct - 1)]);
    std::shuffle(keys.begin(), keys.end(), rng.engine());
    std::vector<float> values;
    for (uint64_t k : keys) {
      const auto r = row_for(k, round, dim);
      values.insert(values.end(), r.begin(), r.end());
    }
    auto k = upload(Backend::kCuda, keys);
    auto v = upload(Backend::kCuda, values);
    const size_t n = keys.size();
    switch (round % 4) {
      case 0:
      case 3:
        table->insert_or_assign(n, k.data(), v.data());
        break;
      case 1: {
        BackendBuffer<uint64_t> ek(Backend::kCuda, n), es(Backend::kCuda, n);
        BackendBuffer<float> ev(Backend::kCuda, n * dim);
        const size_t out = table->insert_and_evict(n, k.data(), v.data(), nullptr, ek.data(),
                                                   ev.data(), es.data());
        EXPECT_LE(out, n);
        break;
      }
      case 2: {
        // find_or_insert returns each key's stored row, or its initial row when the key was
        // not stored when its copy ran (new; or evicted earlier in this call by a new key,
        // which the contract allows). Then every batch key still stored gets this round's row.
        BackendBuffer<float> out(Backend::kCuda, n * dim);
        table->find_or_insert(n, k.data(), out.data(), nullptr);
        const auto rows = download(out, n * dim);
        for (size_t i = 0; i < n; ++i) {
          const std::vector<float> got(rows.begin() + i * dim, rows.begin() + (i + 1) * dim);
          std::vector<float> initial(dim);
          fill_initial_row(o.initializer, keys[i], initial.data(), dim);
          const auto before = stored.find(keys[i]);
          const bool was_row = before != stored.end() && got == before->second;
          EXPECT_TRUE(was_row || got == initial) << "find_or_insert row of key " << keys[i];
        }
        const auto now = contents(*table);
        std::vector<uint64_t> still;
        std::vector<float> still_rows;
        for (uint64_t key : std::set<uint64_t>(keys.begin(), keys.end())) {
          if (!now.count(key)) continue;
          still.push_back(key);
          const auto r = row_for(key, round, dim);
          still_rows.insert(still_rows.end(), r.begin(), r.end());
          last_round[key] = round;
        }
        auto sk = upload(Backend::kCuda, still);
        auto sv = upload(Backend::kCuda, still_rows);
        table->assign(still.size(), sk.data(), sv.data());
        continue;
      }
    }
    for (uint64_t key : keys) last_round[key] = round;
  }
  const TableStats s = table->stats();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(table->size(), contents(*table).size());
}

TEST(CudaTableFullLoad, MixedBatchesAtLoadFactorOneKeepTheTableConsistent) {
  DYNEMB_REQUIRE_CUDA();
  run_full_load(TableOptions{}.grouped_write_min_batch, 8);  // the default: bucket locks
}

TEST(CudaTableFullLoad, WideRowsAtLoadFactorOneKeepTheTableConsistent) {
  DYNEMB_REQUIRE_CUDA();
  run_full_load(TableOptions{}.grouped_write_min_batch, 64);
}

TEST(CudaTableFullLoad, GroupedWritesKeepTheTableConsistentToo) {
  DYNEMB_REQUIRE_CUDA();
  run_full_load(0, 8);  // every call grouped by bucket
}

}  // namespace
}  // namespace dynemb::testing

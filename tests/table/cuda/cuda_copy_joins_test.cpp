// Copies of a key that meet at a taken bucket lock take the result of the copy that claimed their
// key (TableOptions::join_contended_copies, off by default; docs/cuda_table.md "Copies of a key in
// one call"). Random batches that repeat a few hot keys thousands of times, on an HBM-only table
// without the owner search: every output must be that of applying the batch in SOME sequential
// order (docs/table_contract.md, "Duplicate keys in one batch"). Checked against a one-thread CPU
// table: keys, founds counts, initializer rows and scores exactly; where copies offer different
// rows, the stored row must be one of them (then the CPU table is given the same row).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/copies_test_util.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing {
namespace {

using namespace copies;

constexpr size_t kBatch = 30000;

TableOptions join_options(bool joins) {
  // The first calls grow it (keys deferred, retried).
  TableOptions o = copies_table_options(128 * 1024, 128 * 1024 / 16);
  o.join_contended_copies = joins;  // HBM-only: no owner search by default
  return o;
}

// kBatch positions: `cold` keys once each, the rest copies of `hot` keys with Zipf-like weights
// (hot[k] about 1 / (k + 1) of them); shuffled.
std::vector<uint64_t> repeated_batch(TestRng& rng, const std::vector<uint64_t>& hot,
                                     const std::vector<uint64_t>& cold) {
  std::vector<double> cdf(hot.size());
  double sum = 0;
  for (size_t k = 0; k < hot.size(); ++k) cdf[k] = sum += 1.0 / double(k + 1);
  std::vector<uint64_t> keys(cold);
  while (keys.size() < kBatch) {
    const double u = double(rng.uniform(0, 1u << 30)) / double(1u << 30) * sum;
    size_t k = 0;
    while (k + 1 < cdf.size() && cdf[k] < u) ++k;
    keys.push_back(hot[k]);
  }
  shuffle_keys(rng, keys);
  return keys;
}

// founds: per key, as many copies report a new key as on the CPU (one for a key the call
// inserts, none for a stored one).
void expect_founds_per_key(const std::vector<uint64_t>& keys, const std::vector<uint8_t>& gpu,
                           const bool* cpu) {
  std::map<uint64_t, int> gpu_new, cpu_new;
  for (size_t i = 0; i < keys.size(); ++i) {
    gpu_new[keys[i]] += gpu[i] == 0;
    cpu_new[keys[i]] += !cpu[i];
  }
  EXPECT_EQ(gpu_new, cpu_new);
}

// The CPU table takes the rows the GPU stored for keys whose copies offered several rows (each
// checked to be one of them); then both tables hold the same rows and scores.
void adopt_and_compare(Table<uint64_t>& gpu, Table<uint64_t>& cpu,
                       const std::map<uint64_t, std::set<std::vector<float>>>& offered) {
  const auto g = dump(gpu);
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  for (const auto& [key, candidates] : offered) {
    const auto it = g.find(key);
    if (it == g.end() || candidates.size() < 2) continue;
    ASSERT_EQ(candidates.count(it->second.row), 1u) << "key " << key << ": a row no copy offered";
    keys.push_back(key);
    rows.insert(rows.end(), it->second.row.begin(), it->second.row.end());
  }
  if (!keys.empty()) cpu.assign(keys.size(), keys.data(), rows.data());
  expect_same_contents(gpu, cpu);
}

void check_joins(bool joins) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  const TableOptions o = join_options(joins);
  auto gpu = make_table<uint64_t>(Backend::kCuda, o);
  auto cpu = make_table<uint64_t>(Backend::kCpu, o);
  std::set<uint64_t> seen;
  std::vector<uint64_t> stored;  // keys stored by earlier rounds

  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    gpu->advance_step();
    cpu->advance_step();
    // Hot keys: half new, half stored in earlier rounds.
    auto hot = distinct_keys(rng, 8, seen);
    for (size_t k = 0; k < 8 && k < stored.size(); ++k)
      hot.push_back(stored[rng.uniform(0, stored.size() - 1)]);
    const auto cold = distinct_keys(rng, 3000, seen);

    // find_or_insert: initializer rows depend on the key only, so every output is exact.
    {
      const auto keys = repeated_batch(rng, hot, cold);
      const auto out = find_or_insert_both(*gpu, *cpu, keys);
      const auto &gv = out.gpu, &cv = out.cpu;
      expect_founds_per_key(keys, out.gpu_founds, out.cpu_founds.get());
      for (size_t i = 0; i < keys.size(); ++i)
        ASSERT_EQ(row_at(gv, i), row_at(cv, i)) << "position " << i;
      adopt_and_compare(*gpu, *cpu, {});
    }
    // find_or_insert_pointers: one address a key, holding the CPU's row.
    {
      const auto keys = repeated_batch(rng, distinct_keys(rng, 4, seen), hot);
      const auto out = find_or_insert_pointers_both(*gpu, *cpu, keys);
      const auto &gp = out.gpu, &cp = out.cpu;
      expect_founds_per_key(keys, out.gpu_founds, out.cpu_founds.get());
      std::map<uint64_t, float*> address;
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_NE(gp[i], nullptr) << "position " << i;
        const auto [it, fresh] = address.emplace(keys[i], gp[i]);
        ASSERT_EQ(it->second, gp[i]) << "two addresses for key " << keys[i];
        if (!fresh) continue;
        std::vector<float> row(kDim);
        ASSERT_EQ(cudaMemcpy(row.data(), gp[i], kDim * sizeof(float), cudaMemcpyDefault),
                  cudaSuccess);
        ASSERT_EQ(row, std::vector<float>(cp[i], cp[i] + kDim)) << "position " << i;
      }
      adopt_and_compare(*gpu, *cpu, {});
    }
    // find_or_insert_given: a new key stores one copy's row; every copy reads the stored row.
    {
      const auto keys = repeated_batch(rng, hot, distinct_keys(rng, 3000, seen));
      const auto rows = random_rows(rng, keys.size());
      const auto out = find_or_insert_given_both(*gpu, *cpu, keys, rows);
      const auto& gv = out.gpu;
      const auto& cf = out.cpu_founds;
      expect_founds_per_key(keys, out.gpu_founds, cf.get());
      // Only a key new to the table stores a copy's row (the CPU saw it new at one copy).
      std::set<uint64_t> fresh;
      for (size_t i = 0; i < keys.size(); ++i)
        if (!cf[i]) fresh.insert(keys[i]);
      std::map<uint64_t, std::set<std::vector<float>>> offered;
      for (size_t i = 0; i < keys.size(); ++i)
        if (fresh.count(keys[i]) != 0) offered[keys[i]].insert(row_at(rows, i));
      const auto g = dump(*gpu);
      for (size_t i = 0; i < keys.size(); ++i)
        ASSERT_EQ(row_at(gv, i), g.at(keys[i]).row) << "position " << i;
      adopt_and_compare(*gpu, *cpu, offered);
    }
    // insert_or_assign and assign: each copy offers its own row; one of them is stored.
    for (const bool assign : {false, true}) {
      const auto keys = repeated_batch(rng, hot, distinct_keys(rng, 3000, seen));
      const auto rows = random_rows(rng, keys.size());
      write_both(*gpu, *cpu, keys, rows, assign);
      std::map<uint64_t, std::set<std::vector<float>>> offered;
      for (size_t i = 0; i < keys.size(); ++i) offered[keys[i]].insert(row_at(rows, i));
      adopt_and_compare(*gpu, *cpu, offered);
    }
    for (const auto& [key, row] : dump(*gpu)) stored.push_back(key);
  }
  EXPECT_GT(gpu->capacity(), o.init_capacity);
  EXPECT_EQ(gpu->stats().evictions, 0u);
  EXPECT_EQ(gpu->stats().refused, cpu->stats().refused);
}

TEST(CudaCopyJoins, RepeatedKeysGiveSomeSequentialOrder) {
  check_joins(true);
}

// The same batches with every copy taking the lock: the reference for the check itself.
TEST(CudaCopyJoins, RepeatedKeysPerCopyGiveSomeSequentialOrder) {
  check_joins(false);
}

// At max capacity with the step set back below every stored score: each copy of a refused key
// is refused and counted (its claimer's refusal sends the copies through the op one by one).
TEST(CudaCopyJoins, RefusedCopiesAreEachRefused) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  std::set<uint64_t> seen;
  auto [gpu, cpu] = full_tables(rng, join_options(true), seen);  // every bucket at step 10
  ASSERT_EQ(gpu->size(), gpu->capacity());
  gpu->set_score(3);
  cpu->set_score(3);
  // New keys only: a stored key's touch would set its score to 3 and let a new key evict it,
  // in an order that depends on the batch's order.
  const std::vector<uint64_t> hot = distinct_keys(rng, 3, seen);
  const auto keys = repeated_batch(rng, hot, distinct_keys(rng, 100, seen));
  const uint64_t gpu_refused = gpu->stats().refused, cpu_refused = cpu->stats().refused;
  const auto out = find_or_insert_both(*gpu, *cpu, keys);
  EXPECT_GT(cpu->stats().refused - cpu_refused, 5000u);
  EXPECT_EQ(gpu->stats().refused - gpu_refused, cpu->stats().refused - cpu_refused);
  expect_same_outputs(out, keys.size());
  adopt_and_compare(*gpu, *cpu, {});
}

}  // namespace
}  // namespace dynemb::testing

// Many copies of a few hot keys in one large call: the CUDA table runs such a call once per
// distinct key (TableOptions::coalesce_copies_min_batch), taking the first copy as the one that
// inserts (find_or_insert*) and the last copy as the one whose row is stored (insert_or_assign,
// assign). That is batch order, so every output and the contents must equal a one-thread CPU
// table's, bit for bit.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/copies_test_util.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing {
namespace {

using namespace copies;

constexpr size_t kBatch = 20000;  // above the default coalesce_copies_min_batch (16384)

TableOptions copies_options(bool hybrid) {
  // The first calls grow it.
  TableOptions o = copies_table_options(128 * 512, 128 * 512 / 4);
  // A hybrid table coalesces calls of 2^14 keys or more by default; an HBM-only one when asked.
  if (hybrid) o.max_hbm_for_values = o.max_capacity / 8 * kDim * sizeof(float);
  if (!hybrid) o.coalesce_copies_min_batch = uint64_t{1} << 14;
  return o;
}

// A batch of kBatch positions: `hot` keys take about 80% of them (the first one half), the
// rest are `cold` keys, each once; shuffled.
std::vector<uint64_t> hot_batch(TestRng& rng, const std::vector<uint64_t>& hot,
                                const std::vector<uint64_t>& cold) {
  std::vector<uint64_t> keys(cold);
  while (keys.size() < kBatch) {
    const size_t pick = rng.chance(0.5) ? 0 : rng.uniform(0, hot.size() - 1);
    keys.push_back(hot[pick]);
  }
  shuffle_keys(rng, keys);
  return keys;
}

void check_copies(bool hybrid) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  const TableOptions o = copies_options(hybrid);
  auto gpu = make_table<uint64_t>(Backend::kCuda, o);
  auto cpu = make_table<uint64_t>(Backend::kCpu, o);
  std::set<uint64_t> seen;

  for (int round = 0; round < 4; ++round) {
    gpu->advance_step();
    cpu->advance_step();
    // Half of the hot keys are new in each round: the first of each copy inserts.
    const auto hot = distinct_keys(rng, 6, seen);
    const auto cold = distinct_keys(rng, 2000, seen);
    const size_t dim = kDim;

    // find_or_insert
    {
      const auto keys = hot_batch(rng, hot, cold);
      expect_same_outputs(find_or_insert_both(*gpu, *cpu, keys), keys.size(),
                          "round " + std::to_string(round) + " ");
      expect_same_contents(*gpu, *cpu);
    }
    // find_or_insert_pointers: every copy of a key gets the same address and the rows match.
    {
      const auto more_hot = distinct_keys(rng, 3, seen);
      const auto keys = hot_batch(rng, more_hot, hot);
      const auto out = find_or_insert_pointers_both(*gpu, *cpu, keys);
      const auto &gp = out.gpu, &cp = out.cpu;
      const auto& gf = out.gpu_founds;
      const auto& cf = out.cpu_founds;
      std::map<uint64_t, float*> address;
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(gf[i] != 0, cf[i]) << "round " << round << " position " << i;
        ASSERT_NE(gp[i], nullptr) << "position " << i;
        const auto [it, fresh] = address.emplace(keys[i], gp[i]);
        ASSERT_EQ(it->second, gp[i]) << "two addresses for key " << keys[i];
        std::vector<float> row(dim);
        ASSERT_EQ(cudaMemcpy(row.data(), gp[i], dim * sizeof(float), cudaMemcpyDefault),
                  cudaSuccess);
        ASSERT_EQ(row, std::vector<float>(cp[i], cp[i] + dim)) << "position " << i;
      }
      expect_same_contents(*gpu, *cpu);
    }
    // insert_or_assign and assign: every copy offers its own row; the last one is stored.
    for (const bool assign : {false, true}) {
      const auto keys = hot_batch(rng, hot, distinct_keys(rng, 2000, seen));
      write_both(*gpu, *cpu, keys, random_rows(rng, keys.size()), assign);
      expect_same_contents(*gpu, *cpu);
    }
    // find_or_insert_given: the first copy of a new key stores its row, the others read it.
    {
      const auto keys = hot_batch(rng, distinct_keys(rng, 4, seen), cold);
      expect_same_outputs(
          find_or_insert_given_both(*gpu, *cpu, keys, random_rows(rng, keys.size())), keys.size(),
          "round " + std::to_string(round) + " ");
      expect_same_contents(*gpu, *cpu);
    }
  }
  EXPECT_GT(gpu->capacity(), o.init_capacity);
  EXPECT_EQ(gpu->stats().evictions, cpu->stats().evictions);
}

TEST(CudaCopiesOfKeys, HbmTableMatchesBatchOrder) {
  check_copies(false);
}
TEST(CudaCopiesOfKeys, HybridTableMatchesBatchOrder) {
  check_copies(true);
}

// find_or_reserve_pointers writes no row, so a hybrid table does not run its large calls once
// per distinct key by default (its copies hold a lock as briefly as on an HBM table): copies of a
// key still end in some sequential order. Every copy of a key gets one address, a stored key is
// found by every copy, a new key is inserted by exactly one copy (founds = false) and found by
// the others, and the table then holds exactly the old and the new keys at those addresses.
TEST(CudaCopiesOfKeys, HybridReservePointersGiveSomeSequentialOrder) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  const TableOptions o = copies_options(true);
  auto gpu = make_table<uint64_t>(Backend::kCuda, o);
  std::set<uint64_t> seen;
  const auto stored = distinct_keys(rng, 2000, seen);
  {
    const auto rows = random_rows(rng, stored.size());
    auto k = upload(Backend::kCuda, stored);
    auto v = upload(Backend::kCuda, rows);
    gpu->insert_or_assign(stored.size(), k.data(), v.data());
  }
  ASSERT_EQ(gpu->size(), stored.size());
  // Hot keys: three stored, three new; the rest once each: stored and new keys.
  std::vector<uint64_t> hot(stored.begin(), stored.begin() + 3);
  for (uint64_t key : distinct_keys(rng, 3, seen)) hot.push_back(key);
  std::vector<uint64_t> cold(stored.begin() + 3, stored.begin() + 1003);
  for (uint64_t key : distinct_keys(rng, 1000, seen)) cold.push_back(key);
  const auto keys = hot_batch(rng, hot, cold);
  const std::set<uint64_t> was_stored(stored.begin(), stored.end());

  auto k = upload(Backend::kCuda, keys);
  BackendBuffer<float*> p(Backend::kCuda, keys.size()), again(Backend::kCuda, keys.size());
  BackendBuffer<bool> f(Backend::kCuda, keys.size());
  gpu->find_or_reserve_pointers(keys.size(), k.data(), p.data(), f.data(), nullptr);
  const auto gp = download(p, keys.size());
  const auto gf = download_flags(Backend::kCuda, f, keys.size());
  std::map<uint64_t, float*> address;
  std::map<uint64_t, size_t> inserts;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_NE(gp[i], nullptr) << "position " << i;
    const auto [it, fresh] = address.emplace(keys[i], gp[i]);
    ASSERT_EQ(it->second, gp[i]) << "two addresses for key " << keys[i];
    if (was_stored.count(keys[i]) != 0) {
      ASSERT_NE(gf[i], 0) << "stored key " << keys[i] << " not found at position " << i;
    } else if (gf[i] == 0) {
      ++inserts[keys[i]];
    }
  }
  std::set<float*> distinct;
  size_t new_keys = 0;
  for (const auto& [key, ptr] : address) {
    distinct.insert(ptr);
    if (was_stored.count(key) != 0) continue;
    ++new_keys;
    ASSERT_EQ(inserts[key], 1u) << "new key " << key << ": copies that saw it missing";
  }
  ASSERT_EQ(distinct.size(), address.size());
  // The keys stored before (some not in the batch) and the batch's new keys.
  ASSERT_EQ(gpu->size(), stored.size() + new_keys);
  gpu->find_pointers(keys.size(), k.data(), again.data(), f.data(), nullptr);
  const auto gp2 = download(again, keys.size());
  const auto gf2 = download_flags(Backend::kCuda, f, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_NE(gf2[i], 0) << "position " << i;
    ASSERT_EQ(gp2[i], gp[i]) << "position " << i;
  }
  EXPECT_EQ(gpu->stats().refused, 0u);
  EXPECT_EQ(gpu->stats().evictions, 0u);
}

// A call that refuses keys (the step set back below every stored score of a full table): the
// copies of a refused key go through the op one by one, so each copy is refused and counted, as
// on the CPU.
void check_refused_copies(bool hybrid) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  std::set<uint64_t> seen;
  TableOptions o = copies_options(hybrid);
  // A hybrid table: a quarter of full_tables' 512 slots have their rows in HBM, the rest in host
  // memory.
  if (hybrid) o.max_hbm_for_values = 128 * kDim * sizeof(float);
  auto [gpu, cpu] = full_tables(rng, o, seen);  // every bucket at step 10
  ASSERT_EQ(gpu->size(), gpu->capacity());
  expect_same_contents(*gpu, *cpu);
  gpu->set_score(3);
  cpu->set_score(3);
  const std::vector<uint64_t> hot = distinct_keys(rng, 3, seen);
  const std::vector<uint64_t> cold = distinct_keys(rng, 100, seen);  // new: refused too
  const auto keys = hot_batch(rng, hot, cold);
  const uint64_t gpu_refused = gpu->stats().refused, cpu_refused = cpu->stats().refused;
  const auto out = find_or_insert_both(*gpu, *cpu, keys);
  EXPECT_GT(cpu->stats().refused - cpu_refused, 10000u);
  EXPECT_EQ(gpu->stats().refused - gpu_refused, cpu->stats().refused - cpu_refused);
  expect_same_outputs(out, keys.size());
  expect_same_contents(*gpu, *cpu);
}

TEST(CudaCopiesOfKeys, RefusedCopiesAreEachRefused) {
  check_refused_copies(false);
}
// A hybrid table's large call finds its owners without a host synchronization (one sort puts
// them first, their count read on the device); the refused copies still go one by one.
TEST(CudaCopiesOfKeys, HybridRefusedCopiesAreEachRefused) {
  check_refused_copies(true);
}

}  // namespace
}  // namespace dynemb::testing

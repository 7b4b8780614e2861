// Many copies of a few hot keys in one large call: the CUDA table runs such a call once per
// distinct key (TableOptions::coalesce_copies_min_batch), taking the first copy as the one that
// inserts (find_or_insert*) and the last copy as the one whose row is stored (insert_or_assign,
// assign). That is batch order, so every output and the contents must equal a one-thread CPU
// table's, bit for bit.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing {
namespace {

constexpr uint32_t kDim = 16;
constexpr size_t kBatch = 20000;  // above the default coalesce_copies_min_batch (16384)

TableOptions copies_options(bool hybrid) {
  TableOptions o;
  o.dim = kDim;
  o.bucket_capacity = 128;
  o.max_capacity = 128 * 512;
  o.init_capacity = o.max_capacity / 4;  // the first calls grow it
  o.max_load_factor = 0.75;
  o.score_policy = ScorePolicy::kStep;
  o.safe_check = SafeCheck::kIgnore;
  o.num_threads = 1;  // the CPU table applies the batch in order
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
  for (size_t i = keys.size(); i > 1; --i) std::swap(keys[i - 1], keys[rng.uniform(0, i - 1)]);
  return keys;
}

std::vector<float> random_rows(TestRng& rng, size_t n) {
  std::vector<float> v(n * kDim);
  for (float& x : v) x = static_cast<float>(rng.uniform(0, 1 << 20)) / 64.0f;
  return v;
}

void expect_same_contents(Table<uint64_t>& gpu, Table<uint64_t>& cpu) {
  const auto g = dump(gpu), c = dump(cpu);
  ASSERT_EQ(g.size(), c.size());
  for (const auto& [key, row] : c) {
    const auto it = g.find(key);
    ASSERT_NE(it, g.end()) << "key " << key << " missing on CUDA";
    ASSERT_EQ(it->second, row) << "key " << key;
  }
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
      auto k = upload(Backend::kCuda, keys);
      BackendBuffer<float> v(Backend::kCuda, keys.size() * dim);
      BackendBuffer<bool> f(Backend::kCuda, keys.size());
      gpu->find_or_insert(keys.size(), k.data(), v.data(), f.data());
      std::vector<float> cv(keys.size() * dim);
      std::unique_ptr<bool[]> cf(new bool[keys.size()]);
      cpu->find_or_insert(keys.size(), keys.data(), cv.data(), cf.get());
      const auto gv = download(v, keys.size() * dim);
      const auto gf = download_flags(Backend::kCuda, f, keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(gf[i] != 0, cf[i]) << "round " << round << " position " << i;
        for (size_t d = 0; d < dim; ++d)
          ASSERT_EQ(gv[i * dim + d], cv[i * dim + d]) << "round " << round << " position " << i;
      }
      expect_same_contents(*gpu, *cpu);
    }
    // find_or_insert_pointers: every copy of a key gets the same address and the rows match.
    {
      const auto more_hot = distinct_keys(rng, 3, seen);
      const auto keys = hot_batch(rng, more_hot, hot);
      auto k = upload(Backend::kCuda, keys);
      BackendBuffer<float*> p(Backend::kCuda, keys.size());
      BackendBuffer<bool> f(Backend::kCuda, keys.size());
      gpu->find_or_insert_pointers(keys.size(), k.data(), p.data(), f.data());
      std::vector<float*> cp(keys.size());
      std::unique_ptr<bool[]> cf(new bool[keys.size()]);
      cpu->find_or_insert_pointers(keys.size(), keys.data(), cp.data(), cf.get());
      const auto gp = download(p, keys.size());
      const auto gf = download_flags(Backend::kCuda, f, keys.size());
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
      const auto rows = random_rows(rng, keys.size());
      auto k = upload(Backend::kCuda, keys);
      auto v = upload(Backend::kCuda, rows);
      if (assign) {
        gpu->assign(keys.size(), k.data(), v.data());
        cpu->assign(keys.size(), keys.data(), rows.data());
      } else {
        gpu->insert_or_assign(keys.size(), k.data(), v.data());
        cpu->insert_or_assign(keys.size(), keys.data(), rows.data());
      }
      expect_same_contents(*gpu, *cpu);
    }
    // find_or_insert_given: the first copy of a new key stores its row, the others read it.
    {
      const auto keys = hot_batch(rng, distinct_keys(rng, 4, seen), cold);
      const auto rows = random_rows(rng, keys.size());
      auto k = upload(Backend::kCuda, keys);
      auto v = upload(Backend::kCuda, rows);
      BackendBuffer<bool> f(Backend::kCuda, keys.size());
      gpu->find_or_insert_given(keys.size(), k.data(), v.data(), f.data());
      std::vector<float> cv(rows);
      std::unique_ptr<bool[]> cf(new bool[keys.size()]);
      cpu->find_or_insert_given(keys.size(), keys.data(), cv.data(), cf.get());
      const auto gv = download(v, keys.size() * dim);
      const auto gf = download_flags(Backend::kCuda, f, keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(gf[i] != 0, cf[i]) << "round " << round << " position " << i;
        for (size_t d = 0; d < dim; ++d)
          ASSERT_EQ(gv[i * dim + d], cv[i * dim + d]) << "round " << round << " position " << i;
      }
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

// A call that refuses keys (the step set back below every stored score of a full table): the
// copies of a refused key go through the op one by one, so each copy is refused and counted, as
// on the CPU.
TEST(CudaCopiesOfKeys, RefusedCopiesAreEachRefused) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  TableOptions o = copies_options(false);
  o.max_capacity = o.init_capacity = 128 * 4;
  o.max_load_factor = 1.0;
  auto gpu = make_table<uint64_t>(Backend::kCuda, o);
  auto cpu = make_table<uint64_t>(Backend::kCpu, o);
  std::set<uint64_t> seen;
  // Fill every bucket at step 10.
  gpu->set_score(10);
  cpu->set_score(10);
  // One key a call: at max capacity two keys of one call sharing a bucket may evict in either
  // order (docs/table_contract.md).
  for (int calls = 0; gpu->size() < gpu->capacity() && calls < 20000; ++calls) {
    const auto keys = distinct_keys(rng, 1, seen);
    const auto rows = random_rows(rng, keys.size());
    auto k = upload(Backend::kCuda, keys);
    auto v = upload(Backend::kCuda, rows);
    gpu->insert_or_assign(keys.size(), k.data(), v.data());
    cpu->insert_or_assign(keys.size(), keys.data(), rows.data());
  }
  ASSERT_EQ(gpu->size(), gpu->capacity());
  expect_same_contents(*gpu, *cpu);
  gpu->set_score(3);
  cpu->set_score(3);
  const std::vector<uint64_t> hot = distinct_keys(rng, 3, seen);
  const std::vector<uint64_t> cold = distinct_keys(rng, 100, seen);  // new: refused too
  const auto keys = hot_batch(rng, hot, cold);
  auto k = upload(Backend::kCuda, keys);
  BackendBuffer<float> v(Backend::kCuda, keys.size() * kDim);
  BackendBuffer<bool> f(Backend::kCuda, keys.size());
  const uint64_t gpu_refused = gpu->stats().refused, cpu_refused = cpu->stats().refused;
  gpu->find_or_insert(keys.size(), k.data(), v.data(), f.data());
  std::vector<float> cv(keys.size() * kDim);
  std::unique_ptr<bool[]> cf(new bool[keys.size()]);
  cpu->find_or_insert(keys.size(), keys.data(), cv.data(), cf.get());
  EXPECT_GT(cpu->stats().refused - cpu_refused, 10000u);
  EXPECT_EQ(gpu->stats().refused - gpu_refused, cpu->stats().refused - cpu_refused);
  const auto gv = download(v, keys.size() * kDim);
  const auto gf = download_flags(Backend::kCuda, f, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(gf[i] != 0, cf[i]) << "position " << i;
    for (size_t d = 0; d < kDim; ++d) ASSERT_EQ(gv[i * kDim + d], cv[i * kDim + d]) << i;
  }
  expect_same_contents(*gpu, *cpu);
}

}  // namespace
}  // namespace dynemb::testing

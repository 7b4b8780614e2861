// CPU/CUDA parity: the same random operation sequence on a CPU and a CUDA table must leave the
// same contents (keys, rows bit-exact, scores) and give the same outputs. Batches avoid what the
// contract leaves open (duplicates in one batch; at max capacity, two batch keys in one bucket).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing {
namespace {

// Calls one table with host vectors, moving them through its backend's memory.
template <TableKey K>
class Driver {
 public:
  Driver(Backend backend, const TableOptions& options)
      : backend_(backend), table_(make_table<K>(backend, options)) {}

  Table<K>& table() { return *table_; }

  void find(const std::vector<K>& keys, std::vector<float>* values, std::vector<uint8_t>* founds,
            std::vector<uint64_t>* scores) {
    const size_t n = keys.size(), dim = table_->dim();
    auto k = upload(backend_, keys);
    BackendBuffer<float> v(backend_, n * dim);
    BackendBuffer<bool> f(backend_, n);
    BackendBuffer<uint64_t> s(backend_, n);
    table_->find(n, k.data(), v.data(), f.data(), s.data());
    *founds = download_flags(backend_, f, n);
    *values = download(v, n * dim);
    *scores = download(s, n);
  }

  // find_or_insert, or find_or_insert_given where `rows` (the offered rows) is set.
  void find_or_insert(const std::vector<K>& keys, const std::vector<uint64_t>* given,
                      std::vector<float>* values, std::vector<uint8_t>* founds,
                      const std::vector<float>* rows = nullptr) {
    const size_t n = keys.size(), dim = table_->dim();
    auto k = upload(backend_, keys);
    BackendBuffer<float> v(backend_, n * dim);
    BackendBuffer<bool> f(backend_, n);
    BackendBuffer<uint64_t> g(backend_, n);
    if (given) g.upload(given->data(), n);
    if (rows) {
      v.upload(rows->data(), n * dim);
      table_->find_or_insert_given(n, k.data(), v.data(), f.data(), given ? g.data() : nullptr);
    } else {
      table_->find_or_insert(n, k.data(), v.data(), f.data(), given ? g.data() : nullptr);
    }
    *values = download(v, n * dim);
    *founds = download_flags(backend_, f, n);
  }

  // op: 0 insert_or_assign, 1 assign, 2 accum_or_assign.
  void write(int op, const std::vector<K>& keys, const std::vector<float>& values,
             const std::vector<uint64_t>* given) {
    const size_t n = keys.size();
    auto k = upload(backend_, keys);
    auto v = upload(backend_, values);
    BackendBuffer<uint64_t> g(backend_, n);
    if (given) g.upload(given->data(), n);
    const uint64_t* gp = given ? g.data() : nullptr;
    if (op == 0) table_->insert_or_assign(n, k.data(), v.data(), gp);
    if (op == 1) table_->assign(n, k.data(), v.data(), gp);
    if (op == 2) table_->accum_or_assign(n, k.data(), v.data(), gp);
  }

  // (key, row, score) of every evicted or refused entry, sorted.
  std::vector<std::tuple<K, std::vector<float>, uint64_t>> insert_and_evict(
      const std::vector<K>& keys, const std::vector<float>& values,
      const std::vector<uint64_t>* given) {
    const size_t n = keys.size(), dim = table_->dim();
    auto k = upload(backend_, keys);
    auto v = upload(backend_, values);
    BackendBuffer<uint64_t> g(backend_, n);
    if (given) g.upload(given->data(), n);
    BackendBuffer<K> ek(backend_, n);
    BackendBuffer<float> ev(backend_, n * dim);
    BackendBuffer<uint64_t> es(backend_, n);
    const size_t count = table_->insert_and_evict(n, k.data(), v.data(), given ? g.data() : nullptr,
                                                  ek.data(), ev.data(), es.data());
    const auto hk = download(ek, count);
    const auto hv = download(ev, count * dim);
    const auto hs = download(es, count);
    std::vector<std::tuple<K, std::vector<float>, uint64_t>> out;
    for (size_t i = 0; i < count; ++i) {
      out.emplace_back(hk[i], std::vector<float>(hv.begin() + i * dim, hv.begin() + (i + 1) * dim),
                       hs[i]);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  void erase(const std::vector<K>& keys) {
    auto k = upload(backend_, keys);
    table_->erase(keys.size(), k.data());
  }

  void assign_scores(const std::vector<K>& keys, const std::vector<uint64_t>& scores) {
    auto k = upload(backend_, keys);
    auto s = upload(backend_, scores);
    table_->assign_scores(keys.size(), k.data(), s.data());
  }

 private:
  Backend backend_;
  std::unique_ptr<Table<K>> table_;
};

template <TableKey K>
void run_parity(ScorePolicy policy, uint32_t dim, InitializerKind init_kind, uint32_t width = 0,
                bool grouped_writes = false) {
  TestRng rng;
  TableOptions o;
  o.dim = dim;
  o.bucket_capacity = 32;
  o.init_capacity = 32 * 2;
  o.max_capacity = 32 * 64;
  o.max_load_factor = 0.75;
  o.score_policy = policy;
  o.safe_check = SafeCheck::kIgnore;
  o.initializer.kind = init_kind;
  o.initializer.seed = rng.next();
  o.initializer.width = width;
  o.num_threads = 2;
  if (grouped_writes) o.grouped_write_min_batch = 0;
  Driver<K> cpu(Backend::kCpu, o);
  Driver<K> gpu(Backend::kCuda, o);

  // A key universe larger than max capacity, so the table ends up evicting.
  std::vector<K> universe;
  {
    std::set<K> seen;
    while (universe.size() < 3000) {
      const K key = static_cast<K>(rng.next() >> rng.uniform(0, 60));
      if (!is_reserved_key(key) && seen.insert(key).second) universe.push_back(key);
    }
  }
  auto pick_batch = [&](size_t max_n) {
    const size_t n = rng.uniform(1, max_n);
    std::set<K> chosen;
    std::set<uint64_t> buckets;
    const bool at_max = gpu.table().capacity() == o.max_capacity;
    const uint64_t num_buckets = gpu.table().capacity() / o.bucket_capacity;
    std::vector<K> keys;
    for (size_t tries = 0; keys.size() < n && tries < 20 * n; ++tries) {
      const K key = universe[rng.uniform(0, universe.size() - 1)];
      if (chosen.count(key)) continue;
      if (at_max) {
        const uint64_t b = bucket_of_hash(hash_key_bits(key_bits(key)), num_buckets);
        if (!buckets.insert(b).second) continue;
      }
      chosen.insert(key);
      keys.push_back(key);
    }
    return keys;
  };
  auto random_values = [&](size_t n) {
    std::vector<float> v(n * dim);
    for (auto& x : v)
      x = static_cast<float>(static_cast<int64_t>(rng.uniform(0, 2000)) - 1000) / 8.0f;
    return v;
  };
  auto random_scores = [&](size_t n) {
    std::vector<uint64_t> s(n);
    for (auto& x : s) x = rng.uniform(1, 50);
    return s;
  };

  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int op = static_cast<int>(rng.uniform(0, 8));
    const bool with_scores = (policy == ScorePolicy::kLfu || policy == ScorePolicy::kCustomized) &&
                             rng.uniform(0, 1) == 1;
    if (policy == ScorePolicy::kStep && rng.uniform(0, 3) == 0) {
      cpu.table().advance_step();
      gpu.table().advance_step();
    }
    if (policy == ScorePolicy::kCustomized && rng.uniform(0, 3) == 0) {
      const uint64_t s = cpu.table().score() + rng.uniform(0, 5);
      cpu.table().set_score(s);
      gpu.table().set_score(s);
    }
    const std::vector<K> keys = pick_batch(op == 7 ? 20 : 300);
    const size_t n = keys.size();
    const auto scores = random_scores(n);
    const std::vector<uint64_t>* given = with_scores ? &scores : nullptr;
    if (op <= 2) {
      const auto values = random_values(n);
      cpu.write(op, keys, values, given);
      gpu.write(op, keys, values, given);
    } else if (op == 3) {
      std::vector<float> cv, gv;
      std::vector<uint8_t> cf, gf;
      // Half the time with the caller's rows for new keys (find_or_insert_given).
      const std::vector<float> offered = random_values(n);
      const std::vector<float>* rows = rng.uniform(0, 1) == 1 ? &offered : nullptr;
      cpu.find_or_insert(keys, given, &cv, &cf, rows);
      gpu.find_or_insert(keys, given, &gv, &gf, rows);
      ASSERT_EQ(cf, gf);
      ASSERT_EQ(cv, gv);
    } else if (op == 4) {
      const auto values = random_values(n);
      const auto ce = cpu.insert_and_evict(keys, values, given);
      const auto ge = gpu.insert_and_evict(keys, values, given);
      ASSERT_EQ(ce, ge);
    } else if (op == 5) {
      cpu.erase(keys);
      gpu.erase(keys);
    } else if (op == 6) {
      cpu.assign_scores(keys, scores);
      gpu.assign_scores(keys, scores);
    } else {
      std::vector<float> cv, gv;
      std::vector<uint8_t> cf, gf;
      std::vector<uint64_t> cs, gs;
      cpu.find(keys, &cv, &cf, &cs);
      gpu.find(keys, &gv, &gf, &gs);
      ASSERT_EQ(cf, gf);
      for (size_t i = 0; i < n; ++i) {
        if (!cf[i]) continue;
        ASSERT_EQ(cs[i], gs[i]) << "key " << keys[i];
        for (uint32_t j = 0; j < dim; ++j) ASSERT_EQ(cv[i * dim + j], gv[i * dim + j]);
      }
    }
    if (round % 25 == 24 || round == 299) {
      ASSERT_EQ(cpu.table().capacity(), gpu.table().capacity());
      ASSERT_EQ(cpu.table().size(), gpu.table().size());
      const auto c = dump(cpu.table());
      const auto g = dump(gpu.table());
      ASSERT_EQ(c.size(), g.size());
      ASSERT_TRUE(c == g) << "contents differ after round " << round;
      const TableStats cs = cpu.table().stats(), gs = gpu.table().stats();
      EXPECT_EQ(cs.evictions, gs.evictions);
      EXPECT_EQ(cs.refused, gs.refused);
      EXPECT_EQ(cs.erased, gs.erased);
      EXPECT_EQ(cs.rehashes, gs.rehashes);
    }
  }
  EXPECT_EQ(gpu.table().capacity(), o.max_capacity) << "the sequence should reach max capacity";
}

TEST(CudaParity, StepInt64Uniform) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<int64_t>(ScorePolicy::kStep, 7, InitializerKind::kUniform);
}

TEST(CudaParity, LfuUint64Normal) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<uint64_t>(ScorePolicy::kLfu, 16, InitializerKind::kNormal);
}

TEST(CudaParity, CustomizedInt64TruncatedNormal) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<int64_t>(ScorePolicy::kCustomized, 32, InitializerKind::kTruncatedNormal);
}

TEST(CudaParity, InitializerWidthLeavesTheStateZero) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<int64_t>(ScorePolicy::kStep, 24, InitializerKind::kUniform, 9);
  run_parity<uint64_t>(ScorePolicy::kLfu, 24, InitializerKind::kNormal, 10);
}

// Rows and widths that cut the initializer's quads (odd dims take the element-by-element stores,
// odd widths end the drawn part inside a quad or a normal pair).
TEST(CudaParity, InitializerQuadsCutByOddDimsAndWidths) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<int64_t>(ScorePolicy::kStep, 7, InitializerKind::kNormal);
  run_parity<uint64_t>(ScorePolicy::kLfu, 24, InitializerKind::kNormal, 11);
  run_parity<int64_t>(ScorePolicy::kStep, 13, InitializerKind::kUniform, 6);
}

// Uniform rows of at least two quads a thread, which the kernels draw two quads at a time: 4-thread
// tiles (dim 32), 8-thread tiles (dim 64), a last pair with one quad past the row and a width
// that cuts a quad (dim 100, width 70), and grouped writes. Rows of 32 floats or more are also
// the ones find_or_insert asks of L2 while it confirms the key.
TEST(CudaParity, UniformRowsDrawnTwoQuadsAtATime) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<int64_t>(ScorePolicy::kStep, 32, InitializerKind::kUniform);
  run_parity<uint64_t>(ScorePolicy::kLfu, 64, InitializerKind::kUniform);
  run_parity<int64_t>(ScorePolicy::kStep, 100, InitializerKind::kUniform, 70);
  run_parity<uint64_t>(ScorePolicy::kCustomized, 64, InitializerKind::kUniform, 0, true);
}

TEST(CudaParity, StepUint64Dim1) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<uint64_t>(ScorePolicy::kStep, 1, InitializerKind::kUniform);
}

// The same sequences with every write grouped by bucket (no bucket locks), growth retries and
// evictions included.
TEST(CudaParity, GroupedWritesStepInt64Uniform) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<int64_t>(ScorePolicy::kStep, 7, InitializerKind::kUniform, 0, true);
}

TEST(CudaParity, GroupedWritesLfuUint64Normal) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<uint64_t>(ScorePolicy::kLfu, 16, InitializerKind::kNormal, 0, true);
}

TEST(CudaParity, GroupedWritesCustomizedInt64) {
  DYNEMB_REQUIRE_CUDA();
  run_parity<int64_t>(ScorePolicy::kCustomized, 32, InitializerKind::kTruncatedNormal, 0, true);
}

}  // namespace
}  // namespace dynemb::testing

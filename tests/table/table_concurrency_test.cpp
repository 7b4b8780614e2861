// Several host threads on one table: reads and writes on shared and disjoint key ranges while
// the table grows; invariants checked afterwards. (Re-run under ThreadSanitizer by test.sh.)
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableConcurrencyTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableConcurrencyTest, AllTableConfigs, TableConfigNames);

#if defined(__SANITIZE_THREAD__)
constexpr int kRounds = 300;
#else
constexpr int kRounds = 6000;
#endif
constexpr int kThreads = 6;
constexpr size_t kOwnKeys = 2000;  // per thread
constexpr size_t kSharedKeys = 500;
constexpr size_t kBatch = 64;

TYPED_TEST(TableConcurrencyTest, MixedReadersAndWritersKeepEveryInvariant) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o;
  o.dim = 4;
  o.bucket_capacity = 32;
  o.init_capacity = 512;
  o.max_capacity = 1 << 16;  // room for every key: growth only, no eviction
  o.score_policy = ScorePolicy::kLfu;
  o.num_threads = 2;
  auto h = this->make(o);
  const auto all = random_keys<K>(rng, kSharedKeys + kThreads * kOwnKeys);
  const std::vector<K> shared(all.begin(), all.begin() + kSharedKeys);
  // Every shared key starts at a zero row with count 1; each accum adds 1.0 and 1 to the count.
  h.insert_or_assign(shared, std::vector<float>(shared.size() * o.dim, 0.0f));
  std::vector<uint64_t> seeds(kThreads);
  for (auto& s : seeds) s = rng.next();

  // Per thread: which own keys are live with which salt; per shared key, adds and touches.
  std::vector<std::vector<float>> last_salt(kThreads, std::vector<float>(kOwnKeys, -1.0f));
  std::vector<std::vector<uint32_t>> adds(kThreads, std::vector<uint32_t>(kSharedKeys, 0));
  std::vector<std::vector<uint32_t>> touches(kThreads, std::vector<uint32_t>(kSharedKeys, 0));
  std::atomic<int> bad_reads{0};

  auto worker = [&](int t) {
    std::mt19937_64 gen(seeds[t]);
    auto pick = [&](size_t n) { return static_cast<size_t>(gen() % n); };
    const size_t own_begin = kSharedKeys + static_cast<size_t>(t) * kOwnKeys;
    for (int round = 0; round < kRounds; ++round) {
      std::vector<size_t> own_idx(kBatch), shared_idx(kBatch);
      std::set<size_t> distinct;
      while (distinct.size() < kBatch) distinct.insert(pick(kOwnKeys));
      own_idx.assign(distinct.begin(), distinct.end());
      for (auto& i : shared_idx) i = pick(kSharedKeys);
      std::vector<K> own, sh;
      for (size_t i : own_idx) own.push_back(all[own_begin + i]);
      for (size_t i : shared_idx) sh.push_back(shared[i]);
      switch (gen() % 5) {
        case 0: {  // own keys: write a new salt
          const float salt = static_cast<float>(round);
          h.insert_or_assign(own, value_rows(own, o.dim, salt));
          for (size_t i : own_idx) last_salt[t][i] = salt;
          break;
        }
        case 1: {  // own keys: erase
          h.erase(own);
          for (size_t i : own_idx) last_salt[t][i] = -1.0f;
          break;
        }
        case 2: {  // own keys: read back what this thread wrote
          const FindResult r = h.find(own);
          for (size_t j = 0; j < own.size(); ++j) {
            const float salt = last_salt[t][own_idx[j]];
            const bool ok = salt < 0 ? !r.founds[j]
                                     : r.founds[j] && row_at(r.values, j, o.dim) ==
                                                          value_row(own[j], o.dim, salt);
            if (!ok) ++bad_reads;
          }
          break;
        }
        case 3: {  // shared keys: accumulate 1.0 per copy
          h.accum_or_assign(sh, std::vector<float>(sh.size() * o.dim, 1.0f));
          for (size_t i : shared_idx) ++adds[t][i];
          break;
        }
        default: {  // shared keys: touch (find_or_insert) and read
          const FindResult r = h.find_or_insert(sh);
          for (size_t j = 0; j < sh.size(); ++j) {
            if (!r.founds[j]) ++bad_reads;
          }
          h.contains(sh);
          for (size_t i : shared_idx) ++touches[t][i];
          break;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();

  EXPECT_EQ(bad_reads.load(), 0);
  size_t live = kSharedKeys;
  Snapshot<K> s = h.snapshot();
  for (int t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < kOwnKeys; ++i) {
      const K key = all[kSharedKeys + t * kOwnKeys + i];
      const float salt = last_salt[t][i];
      const auto it = s.find(key);
      if (salt < 0) {
        EXPECT_EQ(it, s.end()) << "thread " << t << " erased key " << key;
      } else {
        ++live;
        ASSERT_NE(it, s.end()) << "thread " << t << " lost key " << key;
        EXPECT_EQ(it->second.row, value_row(key, o.dim, salt)) << "key " << key;
      }
    }
  }
  for (size_t i = 0; i < kSharedKeys; ++i) {
    uint32_t total_adds = 0, total_touches = 0;
    for (int t = 0; t < kThreads; ++t) {
      total_adds += adds[t][i];
      total_touches += touches[t][i];
    }
    const auto it = s.find(shared[i]);
    ASSERT_NE(it, s.end()) << "shared key " << shared[i];
    EXPECT_EQ(it->second.row, Row(o.dim, static_cast<float>(total_adds))) << "shared " << i;
    EXPECT_EQ(it->second.score, 1u + total_adds + total_touches) << "shared " << i;
  }
  EXPECT_EQ(h->size(), live);
  EXPECT_EQ(s.size(), live);
  EXPECT_GT(h->stats().rehashes, 0u);
  EXPECT_EQ(h->stats().evictions, 0u);
  EXPECT_EQ(h->stats().refused, 0u);
}

}  // namespace
}  // namespace dynemb::testing

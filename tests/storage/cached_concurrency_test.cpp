// A caching table used from several threads at once (calls are serialized by its lock) while a
// prefetch_async runs: every thread's rows come out as it wrote them, nothing is lost. Also run
// under ThreadSanitizer by scripts/test.sh (the name matches its "Concurrency" filter).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "storage/storage_kinds.hpp"

namespace dynemb::testing {
namespace {

using K = uint64_t;

TEST(CachedTableConcurrency, ThreadsWritingDisjointKeysWithPrefetchLoseNothing) {
  TestRng rng;
  constexpr uint32_t kDim = 4;
  constexpr int kThreads = 4;
  constexpr size_t kKeysPerThread = 3000, kBatch = 250;
  TableOptions o;
  o.dim = kDim;
  o.init_capacity = o.max_capacity = 512;
  o.max_load_factor = 1.0;
  o.score_policy = ScorePolicy::kLfu;
  auto lower = std::make_shared<MapStorage>(kDim);
  storage::CachedTable<K> t(Backend::kCpu, o, lower);
  const uint64_t salt = rng.next();
  auto key_of = [&](int thread, size_t i) {
    return (salt ^ (uint64_t(thread) << 40)) % (1ull << 62) + i;
  };
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::vector<K> keys(kBatch);
      std::vector<float> rows(kBatch * kDim);
      for (int pass = 0; pass < 2; ++pass) {
        for (size_t first = 0; first < kKeysPerThread; first += kBatch) {
          for (size_t i = 0; i < kBatch; ++i) {
            keys[i] = key_of(th, first + i);
            for (uint32_t c = 0; c < kDim; ++c)
              rows[i * kDim + c] = static_cast<float>(first + i + c);
          }
          if (pass == 0) {
            t.insert_or_assign(kBatch, keys.data(), rows.data());
          } else {  // pass 1 adds the same rows again: every row doubles
            t.accum_or_assign(kBatch, keys.data(), rows.data());
          }
          if (th == 0) {  // one thread prefetches the next keys of another thread
            std::vector<K> next(kBatch);
            for (size_t i = 0; i < kBatch; ++i)
              next[i] = key_of(1, (first + kBatch + i) % kKeysPerThread);
            t.prefetch_async(kBatch, next.data());
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  t.wait_prefetch();
  const size_t n = kThreads * kKeysPerThread;
  std::vector<K> keys(n);
  for (int th = 0; th < kThreads; ++th)
    for (size_t i = 0; i < kKeysPerThread; ++i) keys[th * kKeysPerThread + i] = key_of(th, i);
  std::vector<float> got(n * kDim);
  std::vector<uint64_t> scores(n);
  std::unique_ptr<bool[]> found(new bool[n]);
  t.find(n, keys.data(), got.data(), found.get(), scores.data());
  for (size_t k = 0; k < n; ++k) {
    const size_t i = k % kKeysPerThread;
    ASSERT_TRUE(found[k]) << "key " << keys[k];
    EXPECT_EQ(scores[k], 2u) << "LFU: two touches";
    for (uint32_t c = 0; c < kDim; ++c)
      ASSERT_EQ(got[k * kDim + c], 2.0f * static_cast<float>(i + c));
  }
  EXPECT_EQ(t.size(), n);
  EXPECT_EQ(t.caching_stats().pending_rows, 0u);
}

}  // namespace
}  // namespace dynemb::testing

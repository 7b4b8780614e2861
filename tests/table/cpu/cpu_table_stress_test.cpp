// Several caller threads on one growing table, each with large (pooled) and small batches over
// its own keys, plus a reader over everyone's keys: every thread's keys end as its model says,
// and no reader ever sees a torn row. Meant to run under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dynemb/table/table.hpp"

namespace dynemb {
namespace {

TEST(CpuTableStress, ConcurrentCallersOnAGrowingTable) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuTableStress seed=%llu\n", static_cast<unsigned long long>(seed));
  TableOptions o;
  o.dim = 4;
  o.bucket_capacity = 32;
  o.init_capacity = 64;
  o.max_capacity = 32u << 14;
  o.num_threads = 3;
  auto table = make_table<uint64_t>(Backend::kCpu, o);
  constexpr int kWriters = 3;
  constexpr uint64_t kKeysPerWriter = 30000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0};

  std::thread reader([&] {
    std::mt19937_64 rng(seed ^ 0x5eed);
    const size_t n = 2048;
    std::vector<uint64_t> keys(n);
    std::vector<float> rows(n * o.dim);
    std::unique_ptr<bool[]> founds(new bool[n]);
    while (!done.load()) {
      for (auto& k : keys) k = rng() % (kWriters * kKeysPerWriter);
      table->find(n, keys.data(), rows.data(), founds.get(), nullptr);
      for (size_t i = 0; i < n; ++i) {
        if (!founds[i]) continue;
        for (uint32_t j = 1; j < o.dim; ++j)
          if (rows[i * o.dim + j] != rows[i * o.dim]) torn.fetch_add(1);
      }
    }
  });

  std::vector<std::unordered_map<uint64_t, float>> models(kWriters);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937_64 rng(seed + w);
      auto& model = models[w];
      for (int round = 0; round < 12; ++round) {
        const size_t n = rng() % 2 == 0 ? 20000 : 1 + rng() % 500;  // pooled or inline
        std::vector<uint64_t> keys(n);
        std::unordered_map<uint64_t, int> distinct;
        for (auto& k : keys) {
          do {
            k = w * kKeysPerWriter + rng() % kKeysPerWriter;
          } while (distinct[k]++ != 0);
        }
        const float tag = static_cast<float>(round * 10 + w);
        std::vector<float> rows(n * o.dim, tag);  // every element equal: a torn row shows
        if (rng() % 4 == 0) {
          table->erase(n, keys.data());
          for (uint64_t k : keys) model.erase(k);
        } else {
          table->insert_or_assign(n, keys.data(), rows.data());
          for (uint64_t k : keys) model[k] = tag;
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0u);

  size_t total = 0;
  for (int w = 0; w < kWriters; ++w) {
    total += models[w].size();
    const size_t n = kKeysPerWriter;
    std::vector<uint64_t> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = w * kKeysPerWriter + i;
    std::vector<float> rows(n * o.dim);
    std::unique_ptr<bool[]> founds(new bool[n]);
    table->find(n, keys.data(), rows.data(), founds.get(), nullptr);
    for (size_t i = 0; i < n; ++i) {
      auto it = models[w].find(keys[i]);
      ASSERT_EQ(founds[i], it != models[w].end()) << "key " << keys[i];
      if (founds[i]) ASSERT_EQ(rows[i * o.dim], it->second);
    }
  }
  EXPECT_EQ(table->size(), total);
  EXPECT_EQ(table->stats().evictions, 0u);
  EXPECT_GT(table->stats().rehashes, 0u);
}

}  // namespace
}  // namespace dynemb

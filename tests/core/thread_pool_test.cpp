// The thread pool runs every task exactly once, runs nested loops inline, and rethrows.
#include "dynemb/core/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <stdexcept>
#include <vector>

namespace dynemb::core {
namespace {

TEST(CpuThreadPool, RunsEveryTaskOnceIncludingNestedLoops) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuThreadPool seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  ThreadPool pool(4);
  EXPECT_EQ(pool.threads(), 4u);
  for (int round = 0; round < 20; ++round) {
    const size_t outer = 1 + rng() % 40, inner = 1 + rng() % 10;
    std::vector<std::atomic<int>> hits(outer * inner);
    pool.run(outer, [&](size_t i) {
      pool.run(inner, [&](size_t j) { hits[i * inner + j].fetch_add(1); });
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(CpuThreadPool, RethrowsATaskError) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.run(16,
                        [](size_t i) {
                          if (i == 7) throw std::runtime_error("task 7");
                        }),
               std::runtime_error);
  std::atomic<int> count{0};
  pool.run(5, [&](size_t) { count.fetch_add(1); });  // usable after an error
  EXPECT_EQ(count.load(), 5);
}

}  // namespace
}  // namespace dynemb::core

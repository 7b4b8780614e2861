// The training step's dedup with a workspace (detail::dedup_grouped): each batch's sort covers
// the key bits the previous batch needed, checked on the device, and a batch that needs more bits
// is sorted again. A sequence of batches whose key ranges grow, shrink and change sign (short
// and long batches, int64 and uint64 keys) must give what the CPU gives for every batch, with the
// grouped ids and without them (the bags only).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "core/backend_test.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

using ops_test::download;
using ops_test::upload;

class DedupWorkspace : public dynemb::testing::BackendTest {};

// Keys drawn below 2^bits (some repeated), shifted by `base`.
template <class K>
std::vector<K> draw(std::mt19937_64& rng, size_t n, int bits, K base) {
  std::vector<K> keys(n);
  const uint64_t mask = bits >= 64 ? ~0ull : (uint64_t{1} << bits) - 1;
  for (auto& k : keys) {
    const uint64_t v = rng() % 4 == 0 ? 3 : rng() & mask;
    k = static_cast<K>(static_cast<uint64_t>(base) + v);
  }
  return keys;
}

template <class K>
void check_sequence(Backend backend, std::mt19937_64& rng) {
  ops::detail::StepWorkspace workspace(backend, 0), cpu_workspace(Backend::kCpu, 0);
  struct Shape {
    size_t n;
    int bits;
    K base;
  };
  const K negative = std::is_signed_v<K> ? static_cast<K>(-1000) : static_cast<K>(1ull << 63);
  const std::vector<Shape> shapes = {{1000, 10, 0},
                                     {3000, 10, 0},
                                     {3000, 33, 0},
                                     {500, 5, 0},
                                     {2000, 12, negative},
                                     {1, 0, 7},
                                     {300000, 20, 0},
                                     {300000, 40, 0},
                                     {300000, 8, negative},
                                     {4000, 64, 0},
                                     {100, 3, 0},
                                     {0, 0, 0},
                                     {70000, 17, K(1) << 50},
                                     {70000, 18, K(1) << 50}};
  for (const Shape& shape : shapes) {
    SCOPED_TRACE("n " + std::to_string(shape.n) + " bits " + std::to_string(shape.bits));
    const std::vector<K> keys = draw<K>(rng, shape.n, shape.bits, shape.base);
    const size_t n = keys.size();
    const std::vector<int64_t> offsets{0, static_cast<int64_t>(n)};
    std::vector<K> unique(n + 1);
    std::vector<uint32_t> inverse(n + 1), ids(n + 1), begin(n + 2), bags(n + 1);
    const size_t u = ops::detail::dedup_grouped<K>(
        Backend::kCpu, n, keys.data(), unique.data(), inverse.data(), ids.data(), begin.data(),
        bags.data(), offsets.data(), 1, "test", {}, cpu_workspace, nullptr);
    auto dkeys = upload(backend, keys);
    auto doffsets = upload(backend, offsets);
    BackendBuffer<K> dunique(backend, n + 1);
    BackendBuffer<uint32_t> dinverse(backend, n + 1), dids(backend, n + 1), dbegin(backend, n + 2),
        dbags(backend, n + 1);
    const size_t du = ops::detail::dedup_grouped<K>(
        backend, n, dkeys.data(), dunique.data(), dinverse.data(), dids.data(), dbegin.data(),
        dbags.data(), doffsets.data(), 1, "test", {}, workspace, nullptr);
    ASSERT_EQ(du, u);
    EXPECT_EQ(download(dunique, u), std::vector<K>(unique.begin(), unique.begin() + u));
    EXPECT_EQ(download(dinverse, n), std::vector<uint32_t>(inverse.begin(), inverse.begin() + n));
    EXPECT_EQ(download(dids, n), std::vector<uint32_t>(ids.begin(), ids.begin() + n));
    EXPECT_EQ(download(dbags, n), std::vector<uint32_t>(bags.begin(), bags.begin() + n));
    EXPECT_EQ(download(dbegin, u + 1), std::vector<uint32_t>(begin.begin(), begin.begin() + u + 1));
    // Again without the grouped ids: the same bags, inverse and groups.
    BackendBuffer<uint32_t> dinverse2(backend, n + 1), dbegin2(backend, n + 2),
        dbags2(backend, n + 1);
    const size_t du2 = ops::detail::dedup_grouped<K>(
        backend, n, dkeys.data(), dunique.data(), dinverse2.data(), nullptr, dbegin2.data(),
        dbags2.data(), doffsets.data(), 1, "test", {}, workspace, nullptr);
    ASSERT_EQ(du2, u);
    EXPECT_EQ(download(dinverse2, n), std::vector<uint32_t>(inverse.begin(), inverse.begin() + n));
    EXPECT_EQ(download(dbags2, n), std::vector<uint32_t>(bags.begin(), bags.begin() + n));
    EXPECT_EQ(download(dbegin2, u + 1),
              std::vector<uint32_t>(begin.begin(), begin.begin() + u + 1));
  }
}

TEST_P(DedupWorkspace, KeyRangesThatGrowShrinkAndChangeSignMatchTheCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  check_sequence<int64_t>(GetParam(), rng);
  check_sequence<uint64_t>(GetParam(), rng);
}

INSTANTIATE_TEST_SUITE_P(Backends, DedupWorkspace, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

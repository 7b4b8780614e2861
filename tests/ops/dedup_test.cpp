// dedup against a std::map model on fresh random batches with many repeats.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/ops/dedup.hpp"

namespace dynemb {
namespace {

template <class K>
class Dedup : public ::testing::Test {};
using KeyTypes = ::testing::Types<int64_t, uint64_t>;
TYPED_TEST_SUITE(Dedup, KeyTypes);

// The CPU dedup of `keys` against a std::map model: unique keys ascending, their counts, and
// each position's rank.
template <class K>
void expect_matches_map_model(const std::vector<K>& keys) {
  const size_t n = keys.size();
  std::vector<K> uniq(n);
  std::vector<uint32_t> inverse(n, 0xDEADBEEF), counts(n, 0xDEADBEEF);
  const size_t u =
      dedup<K>(Backend::kCpu, n, keys.data(), uniq.data(), inverse.data(), counts.data());
  std::map<K, uint32_t> model;
  for (K k : keys) ++model[k];
  ASSERT_EQ(u, model.size());
  size_t r = 0;
  for (const auto& [k, c] : model) {
    ASSERT_EQ(uniq[r], k) << "rank " << r;
    ASSERT_EQ(counts[r], c) << "rank " << r;
    ++r;
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(uniq[inverse[i]], keys[i]) << "position " << i;
}

TYPED_TEST(Dedup, MatchesSortedMapModel) {
  using K = TypeParam;
  dynemb::testing::TestRng test_rng;  // prints the seed; replay with DYNEMB_TEST_SEED
  std::mt19937_64& rng = test_rng.engine();
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{100000}}) {
    const uint64_t range = std::max<uint64_t>(1, n / 3);
    std::vector<K> keys(n);
    for (auto& k : keys) {
      // Mix small repeated ids with large and (for int64) negative ones.
      const uint64_t base = rng() % range;
      k = static_cast<K>(rng() % 2 ? base : base * 0x9E3779B97F4A7C15ull);
    }
    expect_matches_map_model(keys);
  }
}

// Batches long enough for the key-range partitions of the CPU backend's threads, shaped to
// unbalance them: one key holding most of the batch, every key equal, every key distinct, and
// keys clustered at both ends of the key type's range.
TYPED_TEST(Dedup, LongAndSkewedBatchesMatchSortedMapModel) {
  using K = TypeParam;
  dynemb::testing::TestRng test_rng;
  std::mt19937_64& rng = test_rng.engine();
  const size_t n = 200000 + rng() % 100000;
  const K lowest = std::numeric_limits<K>::lowest(), highest = std::numeric_limits<K>::max();
  const std::vector<std::function<K(size_t)>> shapes = {
      [&](size_t) { return rng() % 4 != 0 ? K{42} : static_cast<K>(rng() % 5000); },
      [&](size_t) { return K{7}; },
      [&](size_t i) { return static_cast<K>(i * 0x9E3779B97F4A7C15ull); },
      [&](size_t) {
        const K offset = static_cast<K>(rng() % 1000);
        return rng() % 2 ? static_cast<K>(lowest + offset) : static_cast<K>(highest - offset);
      },
  };
  for (size_t shape = 0; shape < shapes.size(); ++shape) {
    SCOPED_TRACE("shape " + std::to_string(shape));
    std::vector<K> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = shapes[shape](i);
    expect_matches_map_model(keys);
  }
}

TYPED_TEST(Dedup, EmptyBatchAndNullPointers) {
  using K = TypeParam;
  EXPECT_EQ(dedup<K>(Backend::kCpu, 0, nullptr, nullptr, nullptr, nullptr), 0u);
  K key = 5;
  uint32_t inv;
  EXPECT_THROW(dedup<K>(Backend::kCpu, 1, &key, nullptr, &inv, nullptr), InvalidArgument);
}

}  // namespace
}  // namespace dynemb

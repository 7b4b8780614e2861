// The key hash and bucket mapping: spread, doubling, reserved keys.
#include <gtest/gtest.h>

#include <bit>
#include <set>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/core/key.hpp"

namespace dynemb {
namespace {

using testing::TestRng;

TEST(HashTest, DistinctKeysGiveDistinctHashes) {
  TestRng rng;
  std::set<uint64_t> hashes;
  const uint64_t base = rng.next();
  for (uint64_t i = 0; i < 100000; ++i) hashes.insert(hash_key_bits(base + i));
  EXPECT_EQ(hashes.size(), 100000u);
}

TEST(HashTest, EveryInputBitFlipsAboutHalfTheOutputBits) {
  TestRng rng;
  for (int bit = 0; bit < 64; ++bit) {
    double flipped = 0;
    const int trials = 2000;
    for (int t = 0; t < trials; ++t) {
      const uint64_t x = rng.next();
      flipped += std::popcount(hash_key_bits(x) ^ hash_key_bits(x ^ (1ull << bit)));
    }
    EXPECT_NEAR(flipped / trials, 32.0, 1.0) << "input bit " << bit;
  }
}

TEST(HashTest, BucketsAreInRangeAndEvenlyFilled) {
  TestRng rng;
  for (uint64_t buckets : {1ull, 3ull, 64ull, 1000ull, 1ull << 20}) {
    SCOPED_TRACE(buckets);
    std::vector<uint64_t> counts(std::min<uint64_t>(buckets, 1024), 0);
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const uint64_t b = bucket_of_hash(hash_key_bits(rng.next()), buckets);
      ASSERT_LT(b, buckets);
      if (buckets <= 1024) ++counts[b];
    }
    if (buckets <= 1024) {
      const double expected = static_cast<double>(n) / buckets;
      for (uint64_t c : counts) EXPECT_NEAR(c, expected, 7 * std::sqrt(expected) + 1);
    }
  }
  // Sequential keys spread too.
  std::vector<int> counts(64, 0);
  for (uint64_t k = 0; k < 64 * 200; ++k) ++counts[bucket_of_hash(hash_key_bits(k), 64)];
  for (int c : counts) EXPECT_NEAR(c, 200, 7 * std::sqrt(200.0));
}

TEST(HashTest, DoublingMapsBucketBTo2bOr2bPlusOne) {
  TestRng rng;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t h = hash_key_bits(rng.next());
    const uint64_t n = rng.uniform(1, 1ull << 34);
    const uint64_t b = bucket_of_hash(h, n), b2 = bucket_of_hash(h, 2 * n);
    ASSERT_TRUE(b2 == 2 * b || b2 == 2 * b + 1) << "hash " << h << ", buckets " << n;
  }
}

TEST(HashTest, DigestsAndStartSlotsAreInRange) {
  TestRng rng;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t h = hash_key_bits(rng.next());
    EXPECT_LT(digest7_of_hash(h), 128u);
    EXPECT_LT(start_slot_of_hash(h, 128), 128u);
    EXPECT_LT(start_slot_of_hash(h, 16), 16u);
  }
}

TEST(KeyTest, TheTopSixteenPatternsAreReserved) {
  EXPECT_FALSE(is_reserved_key<uint64_t>(0));
  EXPECT_FALSE(is_reserved_key<uint64_t>(0xFFFFFFFFFFFFFFEFull));
  EXPECT_TRUE(is_reserved_key<uint64_t>(0xFFFFFFFFFFFFFFF0ull));
  EXPECT_TRUE(is_reserved_key<uint64_t>(kEmptyKey));
  EXPECT_TRUE(is_reserved_key<uint64_t>(kTombstoneKey));
  EXPECT_TRUE(is_reserved_key<uint64_t>(kLockedKey));
  for (int64_t k = -16; k <= -1; ++k) EXPECT_TRUE(is_reserved_key<int64_t>(k)) << k;
  EXPECT_FALSE(is_reserved_key<int64_t>(-17));
  EXPECT_FALSE(is_reserved_key<int64_t>(0));
  EXPECT_FALSE(is_reserved_key<int64_t>(INT64_MAX));
  EXPECT_FALSE(is_reserved_key<int64_t>(INT64_MIN));
  EXPECT_EQ(key_bits<int64_t>(-1), ~0ull);
}

}  // namespace
}  // namespace dynemb

// Growth by doubling: bucket b's keys land in buckets 2b and 2b + 1, with their rows and scores.
#include "table/cpu/rehash.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace dynemb::table::cpu {
namespace {

TEST(CpuRehash, DoublingSplitsEachBucketInTwoAndKeepsEverything) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuRehash seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const uint32_t dim = 3;
  BucketStorage from(16, 32, dim);
  std::unordered_map<uint64_t, uint64_t> scores;  // key -> score
  for (int i = 0; i < 16 * 20; ++i) {
    const uint64_t key = rng() >> 4, hash = hash_key_bits(key);
    const uint64_t b = from.bucket_of(hash);
    const Probe p = from.find_or_free(b, key, hash);
    if (p.found >= 0 || p.free < 0) continue;
    const auto slot = static_cast<uint32_t>(p.free);
    from.place(b, slot, key, hash, rng());
    scores[key] = from.score(b, slot);
    for (uint32_t j = 0; j < dim; ++j) from.row(b, slot)[j] = static_cast<float>(key % 1000 + j);
  }
  BucketStorage to(32, 32, dim);
  EXPECT_EQ(rehash_buckets(from, to, 0, 8) + rehash_buckets(from, to, 8, 16), 0u);
  size_t stored = 0;
  for (uint64_t b = 0; b < to.num_buckets(); ++b) {
    for (uint32_t slot = 0; slot < 32; ++slot) {
      if (!to.is_full_slot(b, slot)) continue;
      ++stored;
      const uint64_t key = to.key(b, slot), hash = hash_key_bits(key);
      ASSERT_EQ(b / 2, from.bucket_of(hash)) << "key " << key << " left its bucket's halves";
      ASSERT_EQ(to.find(b, key, hash), static_cast<int32_t>(slot));
      ASSERT_EQ(to.score(b, slot), scores.at(key));
      for (uint32_t j = 0; j < dim; ++j)
        ASSERT_EQ(to.row(b, slot)[j], static_cast<float>(key % 1000 + j));
    }
  }
  EXPECT_EQ(stored, scores.size());
}

}  // namespace
}  // namespace dynemb::table::cpu

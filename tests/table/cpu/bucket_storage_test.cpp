// Probing inside one bucket: digests, tombstones, free-slot reuse and the lowest-score scan,
// checked against a std::map of what the bucket should hold.
#include "table/cpu/bucket_storage.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "dynemb/core/hash.hpp"

namespace dynemb::table::cpu {
namespace {

// Keys of one bucket of `s` (bucket 0), drawn at random.
std::vector<uint64_t> keys_of_bucket0(const BucketStorage& s, size_t count, std::mt19937_64& rng) {
  std::vector<uint64_t> keys;
  while (keys.size() < count) {
    const uint64_t k = rng() >> 4;
    if (s.bucket_of(hash_key_bits(k)) == 0) keys.push_back(k);
  }
  return keys;
}

TEST(CpuBucketStorage, ProbingSurvivesTombstonesAndReusesFreeSlots) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuBucketStorage seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (uint32_t capacity : {16u, 64u, 128u}) {
    BucketStorage s(4, capacity, 2);
    const auto pool = keys_of_bucket0(s, capacity * 4, rng);
    std::map<uint64_t, uint32_t> model;  // key -> slot
    for (int step = 0; step < 4000; ++step) {
      const uint64_t key = pool[rng() % pool.size()];
      const uint64_t hash = hash_key_bits(key);
      const Probe p = s.find_or_free(0, key, hash);
      auto it = model.find(key);
      ASSERT_EQ(p.found >= 0, it != model.end()) << "step " << step;
      ASSERT_EQ(s.find(0, key, hash), p.found);
      if (it != model.end()) {
        ASSERT_EQ(static_cast<uint32_t>(p.found), it->second);
        if (rng() % 2 == 0) {  // erase
          s.remove(0, it->second);
          model.erase(it);
        }
      } else {
        ASSERT_EQ(p.free >= 0, model.size() < capacity) << "a free slot exists iff not full";
        if (p.free >= 0) {
          ASSERT_FALSE(s.is_full_slot(0, static_cast<uint32_t>(p.free)));
          s.place(0, static_cast<uint32_t>(p.free), key, hash, step);
          model[key] = static_cast<uint32_t>(p.free);
        }
      }
    }
    // Every stored key is still reachable; nothing else is.
    for (uint64_t key : pool) {
      const int32_t slot = s.find(0, key, hash_key_bits(key));
      ASSERT_EQ(slot >= 0, model.count(key) == 1);
    }
  }
}

TEST(CpuBucketStorage, LowestScoreBreaksTiesBySmallestKey) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuBucketStorage seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  BucketStorage s(1, 32, 1);
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> by_score_key;
  for (uint32_t slot = 0; slot < 32; ++slot) {
    const uint64_t key = rng() >> 4, score = rng() % 4;
    s.place(0, slot, key, hash_key_bits(key), score);
    by_score_key[{score, key}] = slot;
  }
  EXPECT_EQ(static_cast<uint32_t>(s.lowest_score_slot(0)), by_score_key.begin()->second);
}

}  // namespace
}  // namespace dynemb::table::cpu

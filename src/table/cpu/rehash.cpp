#include "cpu/rehash.hpp"

#include <cstring>

#include "dynemb/core/score.hpp"

namespace dynemb::table::cpu {
namespace {

// The first free slot on the probe path of `hash` in bucket b of `to`, or -1 if it is full.
int32_t first_free_slot(const BucketStorage& to, uint64_t b, uint64_t hash) {
  const uint32_t groups = to.bucket_capacity() / kGroupWidth;
  uint32_t g = to.start_group(hash);
  for (uint32_t t = 0; t < groups; ++t, g = (g + 1) & (groups - 1)) {
    const uint32_t frees = Group(to.ctrl(b) + g * kGroupWidth).frees();
    if (frees != 0) return static_cast<int32_t>(g * kGroupWidth + __builtin_ctz(frees));
  }
  return -1;
}

}  // namespace

uint64_t rehash_buckets(const BucketStorage& from, const BucketStorage& to, uint64_t first,
                        uint64_t last) {
  const size_t row_bytes = static_cast<size_t>(from.dim()) * sizeof(float);
  uint64_t dropped = 0;
  for (uint64_t b = first; b < last; ++b) {
    const uint8_t* ctrl = from.ctrl(b);
    for (uint32_t s = 0; s < from.bucket_capacity(); ++s) {
      if ((ctrl[s] & kCtrlFullBit) == 0) continue;
      const uint64_t key = from.key(b, s);
      const uint64_t score = from.score(b, s);
      const uint64_t hash = hash_key_bits(key);
      const uint64_t tb = to.bucket_of(hash);
      int32_t slot = first_free_slot(to, tb, hash);
      if (slot >= 0) {
        to.place(tb, static_cast<uint32_t>(slot), key, hash, score);
      } else {
        ++dropped;
        const int32_t victim = to.lowest_score_slot(tb);
        const uint64_t victim_score = to.score(tb, victim);
        const uint64_t victim_key = to.key(tb, victim);
        const bool incoming_loses =
            score < victim_score || (score == victim_score && key < victim_key);
        if (incoming_loses) continue;
        slot = victim;
        to.replace(tb, static_cast<uint32_t>(slot), key, hash, score);
      }
      std::memcpy(to.row(tb, static_cast<uint32_t>(slot)), from.row(b, s), row_bytes);
    }
  }
  return dropped;
}

}  // namespace dynemb::table::cpu

// Where a key may live in a cache: two candidate sets, from two independent hashes, the same on
// the CPU and on the GPU.
#pragma once

#include <cstdint>

#include "dynemb/core/hash.hpp"
#include "dynemb/core/host_device.hpp"

namespace dynemb::cache {

// The two sets a key may occupy among `num_sets` (>= 2); they always differ.
struct CandidateSets {
  uint64_t first;
  uint64_t second;
};

// The candidate sets of a key's 64-bit pattern. A new key goes to the emptier of the two (the
// first on a tie); a full pair evicts the least recently used row of both.
DYNEMB_HD CandidateSets candidate_sets(uint64_t key_bits, uint64_t num_sets) {
  const uint64_t h = hash_key_bits(key_bits);
  const uint64_t first = bucket_of_hash(h, num_sets);
  // A second, independent hash; offset into [1, num_sets) so the two sets differ.
  const uint64_t h2 = hash_key_bits(h ^ 0x9E3779B97F4A7C15ull);
  const uint64_t step = 1 + bucket_of_hash(h2, num_sets - 1);
  const uint64_t second = first + step < num_sets ? first + step : first + step - num_sets;
  return {first, second};
}

}  // namespace dynemb::cache

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
// first on a tie); a full pair evicts the least recently used row of both. Both hashes are salted,
// so they are independent of the tables' bucket hash (hash_key_bits of the key): rows exported
// from a table come in bucket order, and a run of them must still spread over all sets.
DYNEMB_HD CandidateSets candidate_sets(uint64_t key_bits, uint64_t num_sets) {
  const uint64_t first = bucket_of_hash(hash_key_bits(key_bits ^ 0xC2B2AE3D27D4EB4Full), num_sets);
  // Offset into [1, num_sets) from the first, so the two sets differ.
  const uint64_t step =
      1 + bucket_of_hash(hash_key_bits(key_bits ^ 0x9E3779B97F4A7C15ull), num_sets - 1);
  const uint64_t second = first + step < num_sets ? first + step : first + step - num_sets;
  return {first, second};
}

}  // namespace dynemb::cache

// The keys of one timed call: present keys drawn from the stored ones, and new keys.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "bench/table/key_source.hpp"

namespace dynemb::bench {

// A batch of `batch` keys: round(0.6 batch) drawn without replacement from the stored keys and
// the rest fresh from a KeySource, shuffled together.
struct TimedBatch {
  std::vector<uint64_t> keys;          // the batch, in call order
  std::vector<uint64_t> present_keys;  // the stored keys among them
  std::vector<uint64_t> new_keys;      // the keys not stored before the call
};

// Draws a batch from `stored` (the keys a table holds; reordered in place) and `fresh`.
TimedBatch draw_timed_batch(std::vector<uint64_t>& stored, size_t batch, KeySource& fresh,
                            std::mt19937_64& rng);

}  // namespace dynemb::bench

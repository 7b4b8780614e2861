// The benchmark's key batches: power-law draws over the id space, raw (as drawn, with repeats) or
// distinct (deduplicated, with each key's number of draws), generated in parallel and replayable
// from a seed.
#pragma once

#include <cstdint>
#include <vector>

namespace dynemb::bench {

// One batch: keys, and for a distinct batch the draws each key stands for (empty for raw).
struct KeyBatch {
  std::vector<int64_t> keys;
  std::vector<uint32_t> draws;
  uint64_t total_draws = 0;
};

struct KeyStreamSpec {
  uint64_t ids = 50'000'000;  // ids 1..ids
  double alpha = 1.2;
  uint64_t seed = 1;
};

// `count` batches of `draws` raw draws each; batch b is drawn from (seed, stream_id, b).
std::vector<KeyBatch> raw_batches(const KeyStreamSpec& spec, uint64_t stream_id, uint32_t count,
                                  uint64_t draws);

// `count` batches of the distinct keys of `draws` draws each.
std::vector<KeyBatch> deduplicated_batches(const KeyStreamSpec& spec, uint64_t stream_id,
                                           uint32_t count, uint64_t draws);

// `count` batches of exactly `keys` distinct keys each (drawing until that many are distinct).
std::vector<KeyBatch> distinct_batches(const KeyStreamSpec& spec, uint64_t stream_id,
                                       uint32_t count, uint64_t keys);

}  // namespace dynemb::bench

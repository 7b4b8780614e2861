// Moving every stored key into a larger BucketStorage (growth).
#pragma once

#include <cstdint>

#include "cpu/bucket_storage.hpp"

namespace dynemb::table::cpu {

// Copies the keys of source buckets [first, last) of `from` (with scores and rows) into `to`,
// which has more buckets and starts empty. When `to` has exactly twice the buckets, source
// bucket b only feeds buckets 2b and 2b + 1, so disjoint source ranges may run in parallel
// and nothing overflows. Otherwise (the last growth step, clamped to max_capacity) run it over
// all buckets on one thread: a target bucket may overflow, and then the lowest-score entry
// (ties: smallest key bits) of the target and the incoming key is dropped. Returns how many
// keys were dropped.
uint64_t rehash_buckets(const BucketStorage& from, const BucketStorage& to, uint64_t first,
                        uint64_t last);

}  // namespace dynemb::table::cpu

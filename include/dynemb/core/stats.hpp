// Counters every table keeps, so nothing it drops goes unseen.
#pragma once

#include <cstdint>

namespace dynemb {

// Cumulative counts since construction (clear() does not reset them).
struct TableStats {
  uint64_t evictions = 0;       // stored keys replaced by a higher-score insert
  uint64_t refused = 0;         // inserts refused because every score in the bucket was higher
  uint64_t reserved_keys = 0;   // reserved keys in inputs that were skipped (WARNING / IGNORE)
  uint64_t rehashes = 0;        // capacity doublings
  uint64_t erased = 0;          // keys removed by erase / erase_if
};

}  // namespace dynemb

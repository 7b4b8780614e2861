// Score arithmetic shared by the backends: what a touch writes under each policy.
#pragma once

#include <cstdint>

#include "dynemb/core/host_device.hpp"
#include "dynemb/core/options.hpp"

namespace dynemb {

// The score a write stores for a key. `old_score` is the key's score when it exists;
// `given` is the caller's per-key score (or nullptr-equivalent `has_given` false);
// `current` is the table's clock: nanoseconds (TIMESTAMP), step (STEP) or the call-level score
// (CUSTOMIZED).
DYNEMB_HD uint64_t next_score(ScorePolicy policy, bool exists, uint64_t old_score, bool has_given,
                              uint64_t given, uint64_t current) {
  switch (policy) {
    case ScorePolicy::kLfu: {
      const uint64_t inc = has_given ? given : 1;
      const uint64_t base = exists ? old_score : 0;
      return base + inc < base ? ~0ull : base + inc;  // saturate
    }
    case ScorePolicy::kCustomized:
      return has_given ? given : current;
    case ScorePolicy::kTimestamp:
    case ScorePolicy::kStep:
    default:
      return current;
  }
}

// True when a key of score `candidate` may replace a stored key of score `victim`.
DYNEMB_HD constexpr bool may_evict(uint64_t victim, uint64_t candidate) { return victim <= candidate; }

}  // namespace dynemb

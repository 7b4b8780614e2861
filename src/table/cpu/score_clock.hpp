// The table's clock and the per-call score inputs every write uses.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "dynemb/core/options.hpp"
#include "dynemb/core/score.hpp"

namespace dynemb::table::cpu {

// What a write needs to compute scores: the policy, the caller's per-key scores (or null) and
// the call's clock value, read once per call.
struct ScoreInputs {
  ScorePolicy policy = ScorePolicy::kTimestamp;
  const uint64_t* given = nullptr;
  uint64_t current = 0;

  // The score that touching batch entry i stores (see core/score.hpp next_score).
  uint64_t next(size_t i, bool exists, uint64_t old_score) const {
    return next_score(policy, exists, old_score, given != nullptr, given ? given[i] : 0, current);
  }
};

// The table's clock: the step (STEP), the call-level score (CUSTOMIZED), the last time read
// (TIMESTAMP). Thread-safe.
class ScoreClock {
 public:
  explicit ScoreClock(ScorePolicy policy) : policy_(policy) {}

  // The inputs for one write call (reads the system clock once for TIMESTAMP).
  ScoreInputs for_call(const uint64_t* given) {
    uint64_t current = value_.load(std::memory_order_relaxed);
    if (policy_ == ScorePolicy::kTimestamp) {
      current = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
      value_.store(current, std::memory_order_relaxed);
    }
    return ScoreInputs{policy_, given, current};
  }
  // The current clock value.
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }
  // Sets the clock (STEP, CUSTOMIZED); returns the previous value.
  uint64_t set(uint64_t v) { return value_.exchange(v, std::memory_order_relaxed); }
  // Adds one (STEP).
  void advance() { value_.fetch_add(1, std::memory_order_relaxed); }

 private:
  ScorePolicy policy_;
  std::atomic<uint64_t> value_{0};
};

}  // namespace dynemb::table::cpu

// Collects the refusals of one call (from any number of threads) and reports them at its end
// as the safe-check mode says.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>

#include "dynemb/core/options.hpp"

namespace dynemb::table::cpu {

class RefusalLog {
 public:
  // A log for a table whose keys are signed (int64_t) or not; that decides how keys print.
  explicit RefusalLog(bool signed_keys) : signed_keys_(signed_keys) {}

  // Records that batch entry i (key bit pattern `key_bits`) with `score` met a full bucket
  // whose lowest score is `lowest`.
  void note(size_t i, uint64_t key_bits, uint64_t score, uint64_t lowest) {
    std::lock_guard lock(mutex_);
    ++count_;
    if (i < first_index_) {
      first_index_ = i;
      first_key_ = key_bits;
      first_score_ = score;
      first_lowest_ = lowest;
    }
  }
  // How many entries were refused.
  uint64_t count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }
  // ERROR: throws InsertRefused; WARNING: logs one warning; IGNORE: nothing. `call` names the
  // operation.
  void report(SafeCheck mode, const char* call) const;

 private:
  mutable std::mutex mutex_;
  uint64_t count_ = 0;
  size_t first_index_ = std::numeric_limits<size_t>::max();
  bool signed_keys_;
  uint64_t first_key_ = 0;
  uint64_t first_score_ = 0;
  uint64_t first_lowest_ = 0;
};

}  // namespace dynemb::table::cpu

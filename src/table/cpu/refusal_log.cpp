#include "cpu/refusal_log.hpp"

#include "dynemb/core/error.hpp"
#include "dynemb/core/log.hpp"

namespace dynemb::table::cpu {

void RefusalLog::report(SafeCheck mode, const char* call) const {
  std::lock_guard lock(mutex_);
  if (count_ == 0 || mode == SafeCheck::kIgnore) return;
  const std::string message = std::string(call) + ": " + std::to_string(count_) +
                              " insert(s) refused at max capacity; first: keys[" +
                              std::to_string(first_index_) + "] = " +
                              (signed_keys_ ? std::to_string(static_cast<int64_t>(first_key_))
                                            : std::to_string(first_key_)) +
                              " with score " + std::to_string(first_score_) +
                              " < the bucket's lowest score " + std::to_string(first_lowest_);
  if (mode == SafeCheck::kError) throw InsertRefused(message);
  warn(message);
}

}  // namespace dynemb::table::cpu

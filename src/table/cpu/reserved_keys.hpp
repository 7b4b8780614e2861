// The reserved keys one call skipped (safe_check WARNING or IGNORE): the workers note each one
// as they meet it, and the call reports them once at its end. Reserved keys are rare, so the
// shared counters are not contended; a batch of keys that are not reserved never touches them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace dynemb::table::cpu {

class ReservedKeys {
 public:
  // Records that batch entry `index` holds a reserved key (any thread).
  void note(size_t index) {
    count_.fetch_add(1, std::memory_order_relaxed);
    size_t first = first_.load(std::memory_order_relaxed);
    while (index < first &&
           !first_.compare_exchange_weak(first, index, std::memory_order_relaxed)) {
    }
  }
  // How many were noted.
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // The smallest noted index (meaningful when count() > 0).
  size_t first() const { return first_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<size_t> first_{std::numeric_limits<size_t>::max()};
};

}  // namespace dynemb::table::cpu

// Units of the table's size counter claimed ahead by one worker, so that concurrent inserters
// (and erasers) do not all update one shared atomic per key.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace dynemb::table::cpu {

class SlotBudget {
 public:
  // A budget drawing on `size` (the table's stored-key count); erases it notes go to `erased`.
  SlotBudget(std::atomic<uint64_t>& size, std::atomic<uint64_t>& erased)
      : size_(size), erased_(erased) {}
  SlotBudget(const SlotBudget&) = delete;
  SlotBudget& operator=(const SlotBudget&) = delete;
  ~SlotBudget() { release(); }

  // Counts one more stored key. Grabs a few units at a time, never taking `size` past `limit`
  // (unless `unlimited`); false when `size` already is at the limit and none is left here.
  bool take(uint64_t limit, bool unlimited) {
    if (left_ > 0) {
      --left_;
      return true;
    }
    uint64_t current = size_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t room =
          unlimited ? kGrab : (current >= limit ? 0 : std::min(kGrab, limit - current));
      if (room == 0) return false;
      if (size_.compare_exchange_weak(current, current + room, std::memory_order_relaxed)) {
        left_ = room - 1;
        return true;
      }
    }
  }

  // Counts one erased key: its unit of `size` is held here (and may serve a later insert of
  // this worker) until release() hands it and the erase count over.
  void note_erased() {
    ++left_;
    ++erased_here_;
  }

  // Gives unused units back and publishes the erase count (before growth and at the end of a
  // worker's range).
  void release() {
    if (left_ != 0) size_.fetch_sub(left_, std::memory_order_relaxed);
    if (erased_here_ != 0) erased_.fetch_add(erased_here_, std::memory_order_relaxed);
    left_ = 0;
    erased_here_ = 0;
  }

 private:
  static constexpr uint64_t kGrab = 64;
  std::atomic<uint64_t>& size_;
  std::atomic<uint64_t>& erased_;
  uint64_t left_ = 0;
  uint64_t erased_here_ = 0;
};

}  // namespace dynemb::table::cpu

// The per-bucket spin lock: one 32-bit word (0 = free, 1 = held) that readers and writers of a
// bucket both take. Held only for the few hundred nanoseconds one key's operation needs.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dynemb::table::cpu {

// Tells the core it is spinning (lets a sibling hyper-thread run).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Acquires the lock word; spins, then yields the CPU if the holder was descheduled.
inline void lock_word(uint32_t& word) {
  std::atomic_ref<uint32_t> w(word);
  if (w.exchange(1, std::memory_order_acquire) == 0) return;
  for (uint32_t spins = 0;; ++spins) {
    if (w.load(std::memory_order_relaxed) == 0 && w.exchange(1, std::memory_order_acquire) == 0)
      return;
    if (spins < 64) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

// Releases a lock word taken by lock_word.
inline void unlock_word(uint32_t& word) {
  std::atomic_ref<uint32_t>(word).store(0, std::memory_order_release);
}

// Holds a lock word for its lifetime.
class SpinGuard {
 public:
  explicit SpinGuard(uint32_t& word) : word_(word) { lock_word(word_); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;
  ~SpinGuard() { unlock_word(word_); }

 private:
  uint32_t& word_;
};

}  // namespace dynemb::table::cpu

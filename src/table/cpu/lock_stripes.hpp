// The bucket locks: a small power-of-two array of spin-lock words, bucket b guarded by word
// b mod count. Small enough to stay in the L2 cache, so taking a lock costs no memory miss.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>

namespace dynemb::table::cpu {

class LockStripes {
 public:
  // Enough words that `max_buckets` buckets rarely share one (at most 16384 words).
  explicit LockStripes(uint64_t max_buckets)
      : mask_(std::bit_ceil(std::min<uint64_t>(max_buckets, kMaxWords)) - 1),
        words_(new uint32_t[mask_ + 1]()) {}

  // The lock word of bucket b (take it with lock_word / SpinGuard).
  uint32_t& of_bucket(uint64_t b) const { return words_[b & mask_]; }
  // Prefetches the lock word of bucket b for writing.
  void prefetch(uint64_t b) const { __builtin_prefetch(&words_[b & mask_], 1); }

 private:
  static constexpr uint64_t kMaxWords = 16384;
  uint64_t mask_;
  std::unique_ptr<uint32_t[]> words_;
};

}  // namespace dynemb::table::cpu

// Distinct random uint64 keys for filling tables and building timed batches.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dynemb/core/key.hpp"

namespace dynemb::bench {

// Hands out keys that are pairwise distinct and never reserved: a bijective 64-bit mix of a
// running counter xor a seed-derived salt, so no key is ever handed out twice.
class KeySource {
 public:
  // A source whose stream is determined by `seed`.
  explicit KeySource(uint64_t seed) : salt_(mix(seed ^ 0x5bd1e9955bd1e995ull)) {}

  // Writes `n` keys never returned before into `out`.
  void next(size_t n, uint64_t* out) {
    for (size_t i = 0; i < n; ++i) {
      uint64_t key = mix(counter_++ ^ salt_);
      while (is_reserved_key(key)) key = mix(counter_++ ^ salt_);
      out[i] = key;
    }
  }

  // How many counter values were consumed so far.
  uint64_t consumed() const { return counter_; }

 private:
  // A bijection of uint64 (the splitmix64 finalizer): distinct inputs give distinct keys.
  static constexpr uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  uint64_t salt_;
  uint64_t counter_ = 0;
};

}  // namespace dynemb::bench

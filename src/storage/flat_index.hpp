// A map from 8-byte keys to 32-bit indices for the keys of one call (built, read, dropped): open
// addressing with linear probing over a power-of-two table at most half full, so the miss path's
// per-key host work is a probe or two instead of a node allocation.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "dynemb/core/hash.hpp"

namespace dynemb::storage::detail {

class FlatIndex {
 public:
  static constexpr uint32_t kAbsent = ~0u;

  // Room for `expected` keys without growing.
  explicit FlatIndex(size_t expected) {
    const size_t slots = std::bit_ceil(std::max<size_t>(expected * 2, 16));
    keys_.resize(slots);
    values_.assign(slots, kAbsent);
    mask_ = slots - 1;
  }

  // Maps `key` to `value` unless it is mapped already; returns the value it maps to.
  uint32_t emplace(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    for (size_t s = hash_key_bits(key) & mask_;; s = (s + 1) & mask_) {
      if (values_[s] == kAbsent) {
        keys_[s] = key;
        values_[s] = value;
        ++size_;
        return value;
      }
      if (keys_[s] == key) return values_[s];
    }
  }

  // The value `key` maps to, or kAbsent.
  uint32_t find(uint64_t key) const {
    for (size_t s = hash_key_bits(key) & mask_;; s = (s + 1) & mask_) {
      if (values_[s] == kAbsent) return kAbsent;
      if (keys_[s] == key) return values_[s];
    }
  }

  size_t size() const { return size_; }

 private:
  void grow() {
    FlatIndex bigger(keys_.size());
    for (size_t s = 0; s < keys_.size(); ++s)
      if (values_[s] != kAbsent) bigger.emplace(keys_[s], values_[s]);
    *this = std::move(bigger);
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace dynemb::storage::detail

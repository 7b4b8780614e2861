// The key bits a staged pass sorts on: predicted from the keys seen so far, checked on the device
// (docs/storage.md, "A prefetch staged on the device"), the same on the CPU and the GPU.
#pragma once

#include <cstdint>

#include "dynemb/core/host_device.hpp"

namespace dynemb::storage::detail {

// The bits a sort of 8-byte keys looks at: every key agrees with `common` outside [begin, end),
// so sorting bits [begin, end) orders them fully. {0, 64}: all bits (nothing predicted).
struct KeyBits {
  int begin = 0;
  int end = 64;
  uint64_t common = 0;
  DYNEMB_HD bool all() const { return begin == 0 && end == 64; }
  // The bits [begin, end) set.
  DYNEMB_HD uint64_t mask() const {
    const uint64_t below_end = end >= 64 ? ~uint64_t{0} : (uint64_t{1} << end) - 1;
    return below_end & ~((uint64_t{1} << begin) - 1);
  }
  // What the sort gives a position it leaves out: the top of the range (all 64 bits: ~0), so it
  // sorts after every key in range.
  DYNEMB_HD uint64_t filler() const { return all() ? ~uint64_t{0} : (common & ~mask()) | mask(); }
  // Whether a key sorts correctly among the others and apart from the filler.
  DYNEMB_HD bool holds(uint64_t key) const {
    return all() || ((key & ~mask()) == (common & ~mask()) && key != filler());
  }
  bool operator==(const KeyBits&) const = default;
};

// The bits keys whose OR is `any` and whose AND is `every` differ in, widened by `extra` bits at
// the top (a key equal to the range's top value needs one more): all 64 when no key was seen
// (any == 0 and every == ~0) or the range reaches the top bit.
inline KeyBits key_bits_of(uint64_t any, uint64_t every, int extra) {
  if (any == 0 && every == ~uint64_t{0}) return {};
  const uint64_t differ = any ^ every;
  KeyBits b;
  b.begin = differ == 0 ? 0 : __builtin_ctzll(differ);
  b.end = (differ == 0 ? 1 : 64 - __builtin_clzll(differ)) + extra;
  if (b.end >= 64) return {};
  b.common = every;
  return b;
}

}  // namespace dynemb::storage::detail

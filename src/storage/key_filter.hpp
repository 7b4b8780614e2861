// The bits a key sets in the caching table's filter of keys that may be below (a Bloom filter of
// two bits a key over 2^log2_bits bits, log2_bits <= 32), the same on the CPU and the GPU.
#pragma once

#include <cstdint>

#include "dynemb/core/hash.hpp"
#include "dynemb/core/host_device.hpp"

namespace dynemb::storage::detail {

// The two bit positions of `key` (independent of the fast table's bucket hash).
DYNEMB_HD void filter_bits(uint64_t key, uint32_t log2_bits, uint64_t& first, uint64_t& second) {
  const uint64_t h = hash_key_bits(key ^ 0x6A09E667F3BCC909ull);
  const uint64_t mask = (uint64_t{1} << log2_bits) - 1;
  first = h & mask;
  second = (h >> 32) & mask;
}

// Whether `key` may be in the filter `words` (64-bit words).
DYNEMB_HD bool filter_may_hold(const uint64_t* words, uint32_t log2_bits, uint64_t key) {
  uint64_t a = 0, b = 0;
  filter_bits(key, log2_bits, a, b);
  return ((words[a >> 6] >> (a & 63)) & 1) != 0 && ((words[b >> 6] >> (b & 63)) & 1) != 0;
}

}  // namespace dynemb::storage::detail

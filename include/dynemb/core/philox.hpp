// Philox4x32-10, the counter-based generator behind every initializer: the same
// (counter, key) gives the same four words on every backend.
#pragma once

#include <cstdint>

#include "dynemb/core/host_device.hpp"

namespace dynemb {

struct Philox4 {
  uint32_t w[4];
};

// Philox4x32 with 10 rounds of (counter c, key k).
DYNEMB_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.w[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c.w[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = Philox4{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// A float in [0, 1) from the top 24 bits of a word (a multiple of 2^-24, exact).
DYNEMB_HD float uniform01(uint32_t word) { return static_cast<float>(word >> 8) * 0x1.0p-24f; }

// A float in (0, 1] from the top 24 bits of a word (never 0, so log is finite).
DYNEMB_HD float uniform01_open_low(uint32_t word) {
  return static_cast<float>((word >> 8) + 1u) * 0x1.0p-24f;
}

}  // namespace dynemb

// TEMPORARY, for the issue 29 measurements on the 16-core host (removed once measured): bits of
// the environment variable DYNEMB_CPU_TABLE_AB switch this branch's changes off, so that one
// build measures before and after. 1: constant rows drawn element by element; 2: the old task
// split (4 tasks per thread); 4: the serial reserved-key pre-scan in every safe_check mode.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace dynemb::table::cpu {

inline constexpr uint32_t kAbLegacyInit = 1;
inline constexpr uint32_t kAbLegacySplit = 2;
inline constexpr uint32_t kAbLegacyScreen = 4;

// The DYNEMB_CPU_TABLE_AB bits (0 when unset), read once.
inline uint32_t ab_flags() {
  static const uint32_t flags = [] {
    const char* v = std::getenv("DYNEMB_CPU_TABLE_AB");
    return v != nullptr ? static_cast<uint32_t>(std::strtoul(v, nullptr, 0)) : 0u;
  }();
  return flags;
}

}  // namespace dynemb::table::cpu

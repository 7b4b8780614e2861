// How the trainer turns (field, categorical value) into one 64-bit table key: the field in the
// top 8 bits, a hash of the value in the low 56.
#pragma once

#include <cstdint>
#include <string_view>

#include "dynemb/core/hash.hpp"

namespace dynemb::train {

inline constexpr uint32_t kFieldShift = 56;
inline constexpr uint64_t kValueMask = (uint64_t{1} << kFieldShift) - 1;
// Fields 0 .. kMaxFields - 1 hold features; field kBiasField holds the model's bias row. The top
// byte 0xFF is never used, so no key reaches the table's reserved range.
inline constexpr uint32_t kMaxFields = 254;
inline constexpr uint32_t kBiasField = 254;

// The key of `value_hash` in `field` (field < 255): field << 56 | low 56 bits of the hash.
constexpr uint64_t feature_key(uint32_t field, uint64_t value_hash) {
  return (uint64_t{field} << kFieldShift) | (value_hash & kValueMask);
}

// The field a key was made for.
constexpr uint32_t field_of_key(uint64_t key) {
  return static_cast<uint32_t>(key >> kFieldShift);
}

// The key of the model's bias row.
inline constexpr uint64_t kBiasKey = feature_key(kBiasField, 0);

// A 64-bit hash of a byte string (FNV-1a, then a full-avalanche mix).
constexpr uint64_t hash_bytes(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return hash_key_bits(h);
}

}  // namespace dynemb::train

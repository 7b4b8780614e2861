// Key types and the reserved range at the top of the uint64 space.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "dynemb/core/host_device.hpp"

namespace dynemb {

// The key types a table accepts.
template <class K>
concept TableKey = std::same_as<K, int64_t> || std::same_as<K, uint64_t>;

// Keys whose uint64 bit pattern is >= kFirstReservedKey belong to the table itself
// (empty, tombstone, locked markers and spares). For int64 keys these are -16 .. -1.
inline constexpr uint64_t kFirstReservedKey = 0xFFFFFFFFFFFFFFF0ull;
inline constexpr uint64_t kEmptyKey = 0xFFFFFFFFFFFFFFFFull;
inline constexpr uint64_t kTombstoneKey = 0xFFFFFFFFFFFFFFFEull;
inline constexpr uint64_t kLockedKey = 0xFFFFFFFFFFFFFFFDull;

// The key's bit pattern as uint64 (the value the hash and the reserved check see).
template <TableKey K>
DYNEMB_HD constexpr uint64_t key_bits(K key) {
  return static_cast<uint64_t>(key);
}

// True when the key lies in the reserved range and may not be stored.
template <TableKey K>
DYNEMB_HD constexpr bool is_reserved_key(K key) {
  return key_bits(key) >= kFirstReservedKey;
}

}  // namespace dynemb

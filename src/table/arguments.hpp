// Argument checks every backend's table makes the same way, so that a bad call gets the same
// error from each (docs/table_contract.md, "Operations").
#pragma once

#include <algorithm>
#include <cstdint>

#include "dynemb/core/error.hpp"

namespace dynemb::table::detail {

// Throws InvalidArgument("<call>: <argument> = nullptr, must not be null when n > 0") when a
// required pointer `ptr` is null (the caller checks only when its batch is not empty).
inline void require_pointer(const void* ptr, const char* call, const char* argument) {
  require(ptr != nullptr, call, argument, "nullptr", "must not be null when n > 0");
}

// The number of slots export_batch(offset, n_slots) reads from a table of `capacity` slots:
// those of [offset, offset + n_slots) below the capacity, 0 when offset >= capacity (no
// overflow for any offset and n_slots).
inline uint64_t export_slot_count(uint64_t offset, uint64_t n_slots, uint64_t capacity) {
  return offset >= capacity ? 0 : std::min<uint64_t>(n_slots, capacity - offset);
}

}  // namespace dynemb::table::detail

// Argument checks every backend's table makes the same way, so that a bad call gets the same
// error from each (docs/table_contract.md, "Operations").
#pragma once

#include <algorithm>
#include <cstdint>

#include "dynemb/core/error.hpp"
#include "dynemb/core/options.hpp"

namespace dynemb::table::detail {

// Throws InvalidArgument("<call>: <argument> = nullptr, must not be null when n > 0") when a
// required pointer `ptr` is null (the caller checks only when its batch is not empty).
inline void require_pointer(const void* ptr, const char* call, const char* argument) {
  require(ptr != nullptr, call, argument, "nullptr", "must not be null when n > 0");
}

// accum_or_assign adds float32 words; a table whose rows pack 16-bit elements (its initializer's
// value_type) would get meaningless sums, so it is refused before anything changes.
inline void require_float32_rows(const TableOptions& options, const char* call) {
  require(options.initializer.value_type == ValueType::kFloat32, call, "initializer.value_type",
          to_string(options.initializer.value_type),
          "must be float32: the table adds values as float32 words");
}

// The number of slots export_batch(offset, n_slots) reads from a table of `capacity` slots:
// those of [offset, offset + n_slots) below the capacity, 0 when offset >= capacity (no
// overflow for any offset and n_slots).
inline uint64_t export_slot_count(uint64_t offset, uint64_t n_slots, uint64_t capacity) {
  return offset >= capacity ? 0 : std::min<uint64_t>(n_slots, capacity - offset);
}

}  // namespace dynemb::table::detail

// The offsets / indices checks every backend shares, so each says the same thing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dynemb/ops/pooling.hpp"

namespace dynemb::ops::detail {

// validate_lookup_shape: include/dynemb/ops/step_ops.hpp.
// Checks offsets and indices in host memory (same errors).
void validate_lookup_data_host(const char* where, std::span<const LookupFeature> features);
// The errors the data checks raise, shared so every backend says the same thing.
[[noreturn]] void throw_bad_first_offset(const char* where, size_t f, int64_t value);
[[noreturn]] void throw_bad_last_offset(const char* where, size_t f, size_t num_bags, int64_t value,
                                        size_t num_ids);
[[noreturn]] void throw_decreasing_offset(const char* where, size_t f, size_t b, int64_t value,
                                          int64_t previous);
[[noreturn]] void throw_bad_index(const char* where, size_t f, size_t i, uint32_t value,
                                  size_t num_rows);

}  // namespace dynemb::ops::detail

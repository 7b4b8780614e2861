// Input checks shared by both backends' caches: every failure names the argument, the value and
// the limit, and is raised before the cache changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dynemb/cache/cache_options.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::cache::detail {

// Throws InvalidArgument when a pointer a call needs for n > 0 keys is null.
inline void require_buffer(const char* where, const char* name, const void* ptr, size_t n) {
  // The message is built only on failure: a query makes five of these checks.
  if (n != 0 && ptr == nullptr) {
    require(false, where, name, "nullptr",
            "must point to a buffer when n = " + std::to_string(n) + " > 0");
  }
}

// Throws InvalidArgument naming keys[position] when it equals the cache's empty-key sentinel.
template <CacheKey K>
[[noreturn]] void throw_sentinel_key(const char* where, size_t position, K empty_key) {
  throw InvalidArgument(std::string(where) + ": keys[" + std::to_string(position) +
                        "] = " + std::to_string(empty_key) +
                        ", equals the cache's empty_key (the sentinel marking free slots may not "
                        "be used as a key)");
}

// Throws (as throw_sentinel_key) for the first host key equal to `empty_key`.
template <CacheKey K>
void check_no_sentinel_host(const char* where, size_t n, const K* keys, K empty_key) {
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == empty_key) throw_sentinel_key(where, i, empty_key);
  }
}

// Throws InvalidArgument unless sets [first_set, first_set + num_sets) lie within num_total.
inline void check_set_range(const char* where, uint64_t first_set, uint64_t num_sets,
                            uint64_t num_total) {
  require(first_set <= num_total, where, "first_set", std::to_string(first_set),
          "must be <= the cache's " + std::to_string(num_total) + " sets");
  require(num_sets <= num_total - first_set, where, "num_sets", std::to_string(num_sets),
          "must be <= " + std::to_string(num_total - first_set) +
              " (sets after first_set = " + std::to_string(first_set) + ")");
}

// Throws InvalidArgument when a preload of n rows exceeds the rows the cache holds.
inline void check_preload_fits(const char* where, size_t n, const CacheFootprint& footprint) {
  require(n <= footprint.rows, where, "n", std::to_string(n),
          "must be <= the cache's capacity of " + std::to_string(footprint.rows) + " rows (" +
              std::to_string(footprint.slots) + " slots)");
}

}  // namespace dynemb::cache::detail

// Deduplication of a key batch: unique keys + inverse index + counts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dynemb/core/key.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb {

// Writes the distinct keys of keys[0, n) in ascending order to unique_keys, inverse[i] = the
// position of keys[i] among them, and counts[u] = how often unique key u occurs (counts may
// be nullptr). Buffers hold n entries. Returns the number of unique keys (synchronizes the
// stream on CUDA). Same result on every backend.
template <TableKey K>
size_t dedup(Backend backend, size_t n, const K* keys, K* unique_keys, uint32_t* inverse,
             uint32_t* counts, StreamHandle stream = nullptr);

}  // namespace dynemb

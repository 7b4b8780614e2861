// A collection's tables' batches as one batch (src/embedding/embedding_collection.cpp): each
// table's keys carry the table's index in the bits above `shift`, so one dedup serves every
// table and each table's unique keys come out as one range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dynemb/core/host_device.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"
#include "dynemb/ops/ops_backend.hpp"

namespace dynemb::ops::detail {

// The words combine_table_keys reports to the host (backend memory, zeroed before the first
// table): the OR of every key's bits, and UINT64_MAX minus the lowest index of a table whose
// offsets do not start at 0 or end at its num_ids (0: none).
enum TableKeyStatus : size_t { kKeyBitsSeen, kBadTableFlag, kTableKeyStatusWords };

// Table `table`'s part of the combined batch: combined_keys[base + i] = key_bits(keys[i]) |
// table << shift (table 0 adds nothing; shift < 64 otherwise), combined_offsets[bag_base + b] =
// offsets[b] + base for b in [0, num_bags] (num_bags > 0), and the status words above. No
// synchronization.
template <TableKey K>
void combine_table_keys(const OpsBackend& ops, uint32_t table, uint32_t shift, size_t n,
                        const K* keys, const int64_t* offsets, size_t num_bags, uint64_t base,
                        uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                        uint64_t* status, StreamHandle stream);

// After the dedup of combined keys (ascending, u of them): keys[i] = unique_keys[i] without its
// table bits, and bounds[t] = the first unique index of table t for t <= num_tables
// (bounds[num_tables] = u). No synchronization.
template <TableKey K>
void split_table_keys(const OpsBackend& ops, size_t u, const uint64_t* unique_keys,
                      uint32_t num_tables, uint32_t shift, K* keys, uint64_t* bounds,
                      StreamHandle stream);

// The table bits of table t's combined keys (0 for t = 0 or shift >= 64).
DYNEMB_HD uint64_t table_tag(uint32_t table, uint32_t shift) {
  return table == 0 || shift >= 64 ? 0 : uint64_t{table} << shift;
}

// The low `shift` bits (every bit at 64).
DYNEMB_HD uint64_t id_mask(uint32_t shift) {
  return shift >= 64 ? ~uint64_t{0} : (uint64_t{1} << shift) - 1;
}

}  // namespace dynemb::ops::detail

// A collection's tables' batches as one batch (src/embedding/embedding_collection.cpp): each
// table's keys carry the table's index in the bits above `shift`, so one dedup serves every
// table and each table's unique keys come out as one range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dynemb/core/host_device.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"
#include "dynemb/ops/ops_backend.hpp"
#include "dynemb/ops/step_workspace.hpp"

namespace dynemb::ops::detail {

// The words combine_table_keys reports to the host (backend memory, zeroed before the first
// table): the OR of every key's bits, and UINT64_MAX minus the lowest index of a table whose
// offsets do not start at 0 or end at its num_ids (0: none).
enum TableKeyStatus : size_t { kKeyBitsSeen, kBadTableFlag, kTableKeyStatusWords };

// Table `table`'s part of the combined batch: combined_keys[base + i] = key_bits(keys[i]) |
// table << shift (table 0 adds nothing; shift < 64 otherwise), combined_offsets[bag_base + b] =
// offsets[b] (clamped to [0, n]) + base for b in [0, num_bags] (num_bags > 0), and the status
// words above (offsets that do not start at 0, decrease or do not end at n flag the table). No
// synchronization.
template <TableKey K>
void combine_table_keys(const OpsBackend& ops, uint32_t table, uint32_t shift, size_t n,
                        const K* keys, const int64_t* offsets, size_t num_bags, uint64_t base,
                        uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                        uint64_t* status, StreamHandle stream);

// One table's batch for combine_tables_narrow.
struct TableBatch {
  const uint64_t* keys = nullptr;  // num_ids keys' bit patterns (key_bits of int64_t / uint64_t)
  const int64_t* offsets = nullptr;
  uint64_t num_ids = 0, num_bags = 0;  // num_bags = 0 only with num_ids = 0
};

// The most tables combine_tables_narrow takes in one call.
inline constexpr size_t kMaxNarrowTables = 16;

// combine_table_keys of every table in one pass, for a dedup_grouped_async that sorts at most 32
// bits (keys plus table bits): instead of the combined keys, each id's combined key's low 32 bits
// go to workspace.narrow_keys(n) and, when `bags`, each id's bag (over all tables) to
// workspace.bag_of(n) (n: the tables' ids); the combined offsets and the status words as
// combine_table_keys. Pass keys = nullptr to the dedup that follows. Returns false, issuing
// nothing, where the backend has no such pass (the CPU's) or for more than kMaxNarrowTables
// tables. No synchronization.
bool combine_tables_narrow(const OpsBackend& ops, std::span<const TableBatch> tables,
                           uint32_t shift, bool bags, int64_t* combined_offsets, uint64_t* status,
                           StepWorkspace& workspace, StreamHandle stream);

// After the dedup of combined keys (ascending, u of them): keys[i] = unique_keys[i] without its
// table bits, and bounds[t] = the first unique index of table t for t <= num_tables
// (bounds[num_tables] = u). No synchronization.
template <TableKey K>
void split_table_keys(const OpsBackend& ops, size_t u, const uint64_t* unique_keys,
                      uint32_t num_tables, uint32_t shift, K* keys, uint64_t* bounds,
                      StreamHandle stream);

// The collection's step on counts kept on the device (no host read, capturable in a CUDA graph):
// after dedup_grouped_async of the n combined keys, each table's unique keys are spread to a
// padded layout where table t's j-th unique key sits at id_base[t] + j (its ids' range: the
// unique count of a table is at most its ids), so each table's lookup gets a fixed range and its
// count in backend memory; the tables' answers are then gathered back to the compact rows
// [0, u) the pooling and backward read, rows [u, n) being empty padding (no ids, no update).
struct TableSpread {
  size_t n = 0;  // ids over all tables
  uint32_t num_tables = 0;
  uint32_t shift = 64;                        // where the table bits start (64: one table)
  uint32_t key_limit = 64;                    // keys of more bits refuse the batch (64: none)
  const uint64_t* unique_count = nullptr;     // u, from the dedup
  const uint64_t* status = nullptr;           // combine_table_keys' words
  const uint64_t* unique_combined = nullptr;  // n: the dedup's unique combined keys (u valid)
  const uint64_t* combined_keys = nullptr;    // n: each id's combined key (table t's ids in order)
  const uint64_t* id_base = nullptr;          // num_tables + 1: table t's ids start, id_base[T] = n
  uint64_t* bounds = nullptr;                 // num_tables + 1: table t's rows [bounds[t], [t+1])
  uint64_t* counts = nullptr;                 // num_tables: table t's unique keys; 0 if refused
  uint64_t* keys = nullptr;                   // n: row r's key without table bits (r < u)
  uint64_t* padded_keys = nullptr;            // n: the padded layout of keys
  // Per-table counters (backend memory, counter_stride words a table): ids added at
  // lookups_index, unique keys at unique_index; a refused batch adds 1 to *refused.
  uint64_t* counters = nullptr;
  uint32_t counter_stride = 0, lookups_index = 0, unique_index = 0;
  uint64_t* refused = nullptr;
};

// The rows the tables found (padded layout: padded_rows, padded_founds) gathered to the compact
// rows: row r = bounds[t] + j gets padded entry id_base[t] + j for j < counts[t]; a null address
// becomes fallback + r * fallback_stride and missing[r] (training: created counted where a row
// was not found before; evaluation: misses counted); rows [u, n) become padding (fallback address,
// missing, no ids: row_begin[r + 1] = n).
struct TableRows {
  float* const* padded_rows = nullptr;
  const bool* padded_founds = nullptr;
  float* fallback = nullptr;
  uint32_t fallback_stride = 0;
  float** rows = nullptr;
  bool* missing = nullptr;
  uint32_t* row_begin = nullptr;
  uint64_t* counters = nullptr;  // as TableSpread's
  uint32_t counter_stride = 0, created_index = 0, missing_index = 0;
  bool training = true;
  // Whether padding rows [u, n) get their fallback address and missing flag (a backward that
  // updates every row of the bound reads them: the unordered one). false: only their row_begin,
  // for a backward that reads rows [0, u) alone (the deterministic one, by live_rows). A backend
  // may write them anyway; a refused batch's rows are all written.
  bool padding_rows = true;
};

// The spread above (the bounds, the counts, the keys in both layouts); no synchronization.
void spread_table_keys(const OpsBackend& ops, const TableSpread& spread, StreamHandle stream);
// The gather above; no synchronization.
void gather_table_rows(const OpsBackend& ops, const TableSpread& spread, const TableRows& rows,
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

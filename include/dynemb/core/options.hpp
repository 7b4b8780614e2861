// Table options: the score policy, the safe-check mode, capacities and the memory budget.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "dynemb/core/initializer.hpp"

namespace dynemb {

// How a key's score is written when a call touches it. A higher score is more valuable.
enum class ScorePolicy : uint8_t {
  kTimestamp,   // nanoseconds of the host clock (CPU) or the device global timer (CUDA)
  kStep,        // the table's step counter (advance_step / set_score)
  kLfu,         // count of touches (a per-key increment may be given)
  kCustomized,  // given by the caller per key, or per call through set_score
};

// What a refused insert (or a reserved key in the input) does.
enum class SafeCheck : uint8_t {
  kError,    // reserved keys: InvalidArgument before anything changes; refusals: InsertRefused
             // after the batch (the rest of the batch is applied)
  kWarning,  // count, skip, and log a warning
  kIgnore,   // count and skip silently
};

// Where a table lives.
enum class Backend : uint8_t { kCpu, kCuda };

// Everything that shapes a table. Capacities count slots (key-value pairs).
struct TableOptions {
  uint32_t dim = 0;                // floats per value row, > 0
  uint64_t init_capacity = 0;      // slots at construction, a multiple of bucket_capacity
  uint64_t max_capacity = 0;       // growth stops here; >= init_capacity, same multiple rule
  uint32_t bucket_capacity = 128;  // slots per bucket, a power of two in [16, 1024]
  double max_load_factor = 0.5;    // grow (double) when size would exceed this; in (0, 1]
  ScorePolicy score_policy = ScorePolicy::kTimestamp;
  SafeCheck safe_check = SafeCheck::kError;
  InitializerOptions initializer{};
  // CPU backend: worker threads for large batches (0 = all hardware threads).
  uint32_t num_threads = 0;
  // CPU backend: fault in a new storage's memory (at construction and growth, on those worker
  // threads) so that no call pays the kernel's first-touch page faults; false: pages are taken
  // when a call first writes them.
  bool prefault_host_memory = true;
  // CUDA backend: device ordinal, HBM byte budget for values (the rest goes to pinned host
  // memory: hybrid mode), and whether calls lock against each other (off for one stream).
  int device = 0;
  uint64_t max_hbm_for_values = std::numeric_limits<uint64_t>::max();
  bool thread_safe = true;
  // CUDA backend: writing calls of at least this many keys are sorted by bucket and each
  // bucket written by one tile, in batch order, without locks (0: every call); smaller ones lock
  // bucket by bucket. Off by default: the sort costs more than the locks (docs/cuda_table.md).
  uint64_t grouped_write_min_batch = std::numeric_limits<uint64_t>::max();
  // CUDA backend, hybrid mode: a write of many keys visits them in bucket order (address order
  // of their rows); when set, with at most about this many keys in flight at once (0: as many as
  // the GPU holds, the default: a cap of 8192 cost the writes 10-15% on an H100,
  // docs/cuda_table.md, "Hybrid tables").
  uint32_t host_keys_in_flight = 0;
  // CUDA backend: a find_or_insert(_given, _pointers, _reserve_pointers), insert_or_assign or
  // assign call of at least this many keys (no caller scores, not LFU) runs once per distinct
  // key and hands the result to every copy, so that many copies of a hot key do not serialize
  // on its bucket lock; it costs such a call an owner search and one host synchronization
  // (docs/cuda_table.md, "Copies of a key in one call"). Unset: 2^14 on a table with rows in
  // host memory (hybrid) for the ops that write rows, never for find_or_reserve_pointers (no row
  // held under a lock) or on an HBM-only table (there it halves a distinct batch's speed and
  // makes a raw Zipf batch ~500x faster: set it when batches repeat hot ids); max: never.
  std::optional<uint64_t> coalesce_copies_min_batch;
  // CUDA backend: in a find_or_insert(_given, _pointers, _reserve_pointers), insert_or_assign or
  // assign call (no caller scores, not LFU), a copy of a key that finds its bucket's lock taken
  // waits for the copy of its key that holds or waits for the lock and takes its result, so that
  // copies of a hot key do not each take the lock. No host synchronization; a call whose locks
  // are free (distinct keys) never looks. Off by default: on an H100 it made raw Zipf batches of
  // an HBM-only table ~500x faster but distinct 1M-key writes 7-15% slower, and hybrid tables
  // coalesce instead (docs/cuda_table.md, "Copies of a key in one call").
  bool join_contended_copies = false;
};

// Throws InvalidArgument naming the first bad field, its value and its limit.
void validate_table_options(const TableOptions& options);

std::string to_string(ScorePolicy policy);
std::string to_string(SafeCheck mode);
std::string to_string(Backend backend);

// Parses "timestamp" / "step" / "lfu" / "customized" (InvalidArgument otherwise).
ScorePolicy parse_score_policy(const std::string& name);
// Parses "error" / "warning" / "ignore".
SafeCheck parse_safe_check(const std::string& name);
// Parses "cpu" / "cuda".
Backend parse_backend(const std::string& name);

}  // namespace dynemb

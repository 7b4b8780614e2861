// Plain structs shared by the CUDA table's host code and its kernels: where the table's arrays
// live on the device, the per-call scratch state, and the arguments of each kernel family.
#pragma once

#include <cstdint>

#include "dynemb/core/hash.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::table::cuda {

// The digest an empty slot carries. No stored key carries it (slot_digest_of_hash), so a slot
// with this digest is empty without a look at its key.
inline constexpr uint8_t kEmptyDigest = 0;

// The digest a stored key carries in its slot: the hash's 8-bit digest, with kEmptyDigest
// moved to 1 (keys with digest 1 then share it: 2 in 256 instead of 1).
DYNEMB_HD constexpr uint8_t slot_digest_of_hash(uint64_t hash) {
  const uint8_t d = digest8_of_hash(hash);
  return d == kEmptyDigest ? uint8_t{1} : d;
}

// A "no position yet" marker for atomicMin-recorded batch positions.
inline constexpr unsigned long long kNoPosition = ~0ull;

// Cumulative counters of one table, in device memory (stats()).
struct DeviceStats {
  unsigned long long evictions;
  unsigned long long refused;
  unsigned long long reserved_keys;
  unsigned long long erased;
};

// Score bounds (victim.cuh): a bucket of kBoundedBucketSlots slots has kScoreGroups groups of
// kScoreGroupSlots consecutive slots (one 128-byte line of scores each), each with a bound.
inline constexpr uint32_t kScoreGroupSlots = 16;
inline constexpr uint32_t kScoreGroups = 8;
inline constexpr uint32_t kBoundedBucketSlots = kScoreGroupSlots * kScoreGroups;

// Where one table's storage lives. Slot s of bucket b is index b * bucket_capacity + s.
// Row r's values are at hbm_values + r * dim when r < hbm_rows, else in pinned host memory at
// host_values + (r - hbm_rows) * dim (mapped, so kernels reach it directly).
struct TableView {
  uint64_t* keys = nullptr;    // kEmptyKey marks an empty slot
  uint8_t* digests = nullptr;  // kEmptyDigest on empty slots
  uint64_t* scores = nullptr;
  float* hbm_values = nullptr;
  float* host_values = nullptr;
  uint64_t hbm_rows = 0;
  int32_t* bucket_sizes = nullptr;  // stored keys per bucket
  uint32_t* locks = nullptr;        // one spin lock per bucket (writers)
  // kScoreGroups lower bounds per bucket, each at most the lowest score of its group of slots
  // (victim.cuh); null where the table keeps none or a call may not rely on them.
  uint64_t* score_bounds = nullptr;
  uint64_t num_buckets = 0;
  uint32_t bucket_capacity = 0;
  uint32_t dim = 0;
  DeviceStats* stats = nullptr;
};

// Scratch of one call, in device memory, read back by the host where the call returns a count
// or may throw.
struct CallState {
  unsigned long long reserved_position;  // first reserved key's batch position (ERROR mode)
  unsigned long long deferred;           // keys deferred to after a growth (growable tables)
  long long budget;                      // inserts left before the load factor would be exceeded
  unsigned long long emitted;            // insert_and_evict: entries written to evicted_*
  unsigned long long refused;            // refusals in this call
  unsigned long long reserved;           // reserved keys skipped in this call
  unsigned long long count;              // erase_if / size / export counts
  unsigned long long missed;             // find_or_insert: keys the lock-free pass did not find
  unsigned long long evictions;          // rows this call evicted (growth retries included)
  // The CopyJoins epoch of the call's next write launch: kept (and advanced) by every
  // re-initialization of a write's state (launch_init_state, launch_reset_retry).
  unsigned int join_epoch;
  unsigned int join_pad;
  unsigned int refusal_lock;  // guards the first_refused_* record
  unsigned int pad;
  unsigned long long first_refused_position;
  unsigned long long first_refused_key;
  unsigned long long first_refused_score;
  unsigned long long first_refused_bucket_min;
};

// The write operations that share the locked upsert kernel.
enum class WriteOp : uint8_t {
  kFindOrInsert,
  kFindOrInsertPointers,  // find_or_insert(_reserve)_pointers: row addresses instead of copies
  kFindOrInsertGiven,     // find_or_insert_given: missing keys take the caller's row
  kInsertOrAssign,
  kInsertAndEvict,
  kAssign,
  kAssignScores,
  kAccumOrAssign,
  kErase,
  kInsertAndEvictInitial,  // insert_and_evict(_counted) with the initializer's rows (values null)
};

// Whether an op may insert keys (and so grow the table, evict or refuse).
constexpr bool op_inserts(WriteOp op) {
  return op == WriteOp::kFindOrInsert || op == WriteOp::kFindOrInsertPointers ||
         op == WriteOp::kFindOrInsertGiven || op == WriteOp::kInsertOrAssign ||
         op == WriteOp::kInsertAndEvict || op == WriteOp::kAccumOrAssign ||
         op == WriteOp::kInsertAndEvictInitial;
}

// Whether an op reads or writes stored rows (all but assign_scores and erase).
constexpr bool moves_rows(WriteOp op) {
  return op != WriteOp::kAssignScores && op != WriteOp::kErase;
}

// Copies of a key that meet at its locked bucket within one launch (docs/cuda_table.md, "Copies
// of a key in one call"): a copy that finds its bucket's lock taken looks its key up in a small
// table of entries (two candidate entries a key); the first such copy claims an entry, writes the
// key and then waits for the lock; the later ones take its result instead of the lock. Entries
// of earlier launches are told apart by the launch's epoch (CallState::join_epoch), so the table
// is cleared only when the epochs wrap.
struct CopyJoins {
  // An entry's tag: epoch (kJoinEpochBits) | state (3 bits) | owner's batch position (32 bits);
  // null: the launch joins no copies.
  unsigned long long* tags = nullptr;
  unsigned long long* keys = nullptr;  // the key of each claimed entry
  uint32_t entry_bits = 0;             // 2^entry_bits entries
};

// Epochs run over [1, 2^kJoinEpochBits); tags of epoch 0 are free.
inline constexpr uint32_t kJoinEpochBits = 29;

// Arguments of one write kernel launch. Keys are handled as their uint64 bit patterns.
struct WriteArgs {
  const uint64_t* keys = nullptr;
  const uint32_t* subset = nullptr;  // when set, the launch covers keys[subset[t]], t < n
  // Grouped launch (BucketOrder): the bucket and key of each subset entry, buckets ascending.
  // One tile writes each bucket's entries in order, without locks.
  const uint32_t* run_buckets = nullptr;
  const uint64_t* run_keys = nullptr;
  uint64_t n = 0;
  // When set, the launch covers min(*n_device, n) entries (a count a previous kernel wrote).
  const unsigned long long* n_device = nullptr;
  // insert_or_assign / accum / assign / insert_and_evict / find_or_insert_given
  const float* values_in = nullptr;
  float* values_out = nullptr;  // find_or_insert (and _given: the same buffer as values_in)
  float** row_ptrs = nullptr;   // find_or_insert_pointers: row addresses instead of copies
  bool* founds = nullptr;       // find_or_insert (and _given)
  const uint64_t* scores_in = nullptr;
  ScorePolicy policy = ScorePolicy::kTimestamp;
  uint64_t clock = 0;                // step or call-level score (TIMESTAMP reads %globaltimer)
  bool growable = false;             // defer instead of evicting; obey the load-factor budget
  bool skip_reserved = false;        // WARNING / IGNORE: skip and count reserved keys
  uint32_t* deferred_out = nullptr;  // batch positions deferred to after growth
  CallState* state = nullptr;
  uint64_t* evicted_keys = nullptr;
  float* evicted_values = nullptr;
  uint64_t* evicted_scores = nullptr;
  // insert_and_evict_counted: the count of evicted entries is copied here (device memory) instead
  // of being read on the host.
  unsigned long long* emitted_out = nullptr;
  InitializerOptions init{};
  // find_or_insert_pointers: each key is first looked for without the lock (found: address
  // written, score touched atomically, no lock taken); only keys not found take the lock.
  bool lock_free_first = false;
  // find_or_insert_pointers: new keys' rows get the initializer's row (false: the slot is only
  // reserved, its row left as it was: find_or_reserve_pointers).
  bool init_new_rows = true;
  // When set, a locked launch keeps about this many keys resident at once (its blocks hold
  // unused shared memory so that fewer fit an SM): a launch over keys in bucket order then
  // reaches host rows that lie close together.
  uint32_t keys_in_flight = 0;
  // The launch visits its keys in bucket order so that their host-resident rows are reached in
  // address order (a hybrid table's large call; positions in subset).
  bool host_order = false;
  // find_or_insert(_given, _pointers), insert_or_assign, assign: copies meeting at a locked bucket
  // take the result of the copy that holds or waits for it (CopyJoins); tags null: off.
  CopyJoins joins{};
};

// Arguments of find_or_insert's lock-free first pass: keys already stored are found, their rows
// copied out (or their addresses written) and their scores touched; the others are listed for
// the locked pass.
struct TouchArgs {
  const uint64_t* keys = nullptr;
  // When set, the pass covers keys[subset[k]], k < n: in bucket order, its list of keys not found
  // comes out nearly in bucket order too, and so does the locked pass over it.
  const uint32_t* subset = nullptr;
  uint64_t n = 0;
  float* values_out = nullptr;
  float** row_ptrs = nullptr;
  bool* founds = nullptr;
  const uint64_t* scores_in = nullptr;
  ScorePolicy policy = ScorePolicy::kTimestamp;
  uint64_t clock = 0;
  bool skip_reserved = false;
  uint32_t* missed_out = nullptr;  // batch positions not found, count in state->missed
  CallState* state = nullptr;
};

// Arguments of the lock-free read kernels (find, contains).
struct ReadArgs {
  const uint64_t* keys = nullptr;
  const uint32_t* subset = nullptr;  // when set, the launch covers keys[subset[k]], k < n
  uint64_t n = 0;
  float* values = nullptr;
  float** row_ptrs = nullptr;  // find_pointers: row addresses (nullptr: missing)
  bool* founds = nullptr;
  uint64_t* scores = nullptr;
  bool skip_reserved = false;
  CallState* state = nullptr;
  const unsigned long long* only_if_nonzero = nullptr;  // find does nothing while *this is 0
  // When set (with values and subset), a found row in host memory is not copied by the lookup:
  // entry k of the launch writes that row's host index to host_rows[k] (kNoHostRow for every other
  // entry), and a second kernel copies the listed rows in list order (launch_find).
  uint64_t* host_rows = nullptr;
};

// host_rows entry of a key whose row the lookup copied itself (or did not find).
inline constexpr uint64_t kNoHostRow = ~0ull;

}  // namespace dynemb::table::cuda

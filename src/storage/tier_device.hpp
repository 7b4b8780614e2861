// The memory side of a caching table: scratch buffers that live as long as the table, copies
// between host and the fast table's memory, and the few small passes the caching table runs over
// a batch on that memory (docs/storage.md, "The fast tier on the GPU"). One implementation per
// backend: host memory and plain loops on the CPU; on CUDA device buffers, pinned staging,
// asynchronous copies and kernels on the caller's stream, and a stream of its own for prefetch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "dynemb/core/initializer.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"

namespace dynemb::storage::detail {

// The scratch buffers of a caching table, one per use.
enum class Scratch : uint8_t {
  kKeys,
  kRows,
  kScores,
  kCallScores,
  kTouchKeys,
  kTouchScores,
  kPinned,
  kPinnedBelowHeld,
  kFound,
  kPointers,
  kEvictedKeys,
  kEvictedRows,
  kEvictedScores,
  kStill,
  kHeldKeys,
  kHeldScores,
  kCreated,
  kMissPositions,  // list_misses: the missed positions, then their keys
  kMissKeys,
  kMissCount,
  kSelectTemp,
  kMissPointers,  // addresses of the missed positions' rows
  kMissOrder,     // list_misses' sort of the missed keys: 0..m-1, then sorted
  kSortedKeys,
  kSortedOrder,
  kRuns,        // per sorted key: 1 + the index of its distinct key
  kMissIndex,   // per missed position: its distinct key's index
  kMissUnique,  // per distinct key: the key, its first and last position
  kMissFirst,
  kMissLast,
  kMissMaybe,  // per distinct key: the filter's answer
  // A prefetch left on the device (CachedTable::prefetch_step with a private store), kept until
  // the table's next call settles it: its keys, lookup, scores, new keys, rows, evictions, status.
  kDeferKeys,
  kDeferFound,
  kDeferPointers,
  kDeferCurrent,
  kDeferNew,
  kDeferStatus,
  kDeferEvictedKeys,
  kDeferEvictedRows,
  kDeferEvictedScores,
  kDeferSet,    // a prefetch left on the device: the set of its distinct missed keys
  kStageCount,  // stage_new_keys: its distinct keys' count
  kCallNew,     // a find_or_insert whose misses are all new: their keys, status, first positions
  kCallStatus,
  kCallFirst,
  kCallSet,  // ... the set of its distinct missed keys
  kCount
};

// Host row buffers of the miss path, one per use: pinned on CUDA, so copies to and from them
// need no staging.
enum class HostRows : uint8_t {
  kMiss,     // rows read below (and new rows) going up
  kEvicted,  // rows coming down
  kCount
};

// Points in a stream's work that another stream can wait for.
enum class Mark : uint8_t {
  kCallEnd,      // the end of the caching table's last call on the caller's stream
  kPrefetchEnd,  // the end of a prefetch left on the device (on the table's own stream)
  kCount
};

class TierDevice {
 public:
  virtual ~TierDevice() = default;
  // Sizes the scratch of its own passes (list_misses, stage_new_keys) and its pinned staging (for
  // the prefetch stream and the first other stream that copies) for batches of up to `keys` keys,
  // so such batches allocate nothing.
  virtual void reserve(size_t keys, StreamHandle stream) = 0;
  // Buffers allocated or grown so far (scratch, host rows, staging; reserve's included).
  virtual uint64_t growths() const = 0;
  // At least `bytes` of the fast table's memory for `slot`, kept across calls; its contents are
  // kept only while it does not grow. Growing waits for the work issued on `stream`.
  virtual void* scratch(Scratch slot, size_t bytes, StreamHandle stream) = 0;
  // At least `floats` floats of host memory for `which`, kept across calls; its contents are
  // kept only while it does not grow.
  virtual float* host_rows(HostRows which, size_t floats) = 0;
  // Copies `bytes` of host memory into the fast table's memory, ordered on `stream`; `host` may
  // be reused when this returns (CUDA: staged through pinned memory, copied asynchronously),
  // except host_rows memory, copied straight: it must stay unchanged until `stream` is done.
  virtual void upload(void* dst, const void* host, size_t bytes, StreamHandle stream) = 0;
  // Copies `bytes` of the fast table's memory to the host; done when this returns (CUDA:
  // synchronizes `stream`).
  virtual void download(void* host, const void* src, size_t bytes, StreamHandle stream) = 0;
  // Row p of `dst` (the fast table's memory, dim words each) = row index[p] of `host` (host_rows
  // memory, read where it is: on CUDA by the kernel, through unified addressing), p < m; `index`
  // on the host. `host` must stay unchanged until `stream` is done with it.
  virtual void gather_host_rows(size_t m, const uint32_t* index, const float* host, uint32_t dim,
                                float* dst, StreamHandle stream) = 0;
  // Copies within the fast table's memory, ordered on `stream`.
  virtual void copy(void* dst, const void* src, size_t bytes, StreamHandle stream) = 0;
  // dst[i] = value for i < n, ordered on `stream`.
  virtual void fill(size_t n, uint64_t value, uint64_t* dst, StreamHandle stream) = 0;
  // The misses of a batch: the positions i < n where found[i] is false (in order), the distinct
  // keys at them (8-byte bit patterns; first-seen order on the CPU, key order on CUDA), for each
  // missed position the index of its key among them, and for each distinct key its first and
  // last position. The positions and their keys also stay in the fast table's memory, in the
  // scratch of kMissPositions and kMissKeys (n entries each; valid until the next list_misses).
  // CUDA: the distinct keys are sorted out on the device; one small read (a synchronization of
  // `stream`) when nothing is missing, two otherwise.
  struct MissList {
    std::vector<uint32_t> positions;
    std::vector<uint32_t> index;  // per missed position
    std::vector<uint64_t> unique;
    std::vector<uint32_t> first, last;  // per distinct key
    std::vector<uint8_t> maybe_below;   // per distinct key: the filter's answer (all 1 without)
  };
  virtual void list_misses(size_t n, const uint64_t* keys, const bool* found, MissList& out,
                           StreamHandle stream) = 0;
  // The filter of keys that may be below (a private store's, CachingOptions): 2^log2_bits bits
  // in the fast table's memory, all clear; from then on list_misses answers maybe_below from it.
  virtual void filter_reset(uint32_t log2_bits, StreamHandle stream) = 0;
  // Marks n keys (8-byte bit patterns in the fast table's memory, or on the host) as maybe below;
  // ordered on `stream`.
  virtual void filter_add(size_t n, const uint64_t* keys, StreamHandle stream) = 0;
  virtual void filter_add_host(size_t n, const uint64_t* keys, StreamHandle stream) = 0;
  // Copies parts.size() pieces of the fast table's memory to the host with one wait; done when
  // this returns (CUDA: synchronizes `stream` once).
  struct Part {
    void* host;
    const void* src;
    size_t bytes;
  };
  virtual void download_parts(std::initializer_list<Part> parts, StreamHandle stream) = 0;
  // host_out[j] = the `elem_bytes` bytes at src + positions[j] * elem_bytes (j < m); done when
  // this returns. elem_bytes is a multiple of 4.
  virtual void gather(size_t m, const uint32_t* positions, const void* src, size_t elem_bytes,
                      void* host_out, StreamHandle stream) = 0;
  // dst + positions[j] * elem_bytes = the j-th element of `host_src` (j < m), ordered on
  // `stream`. elem_bytes is 1 or a multiple of 4.
  virtual void scatter(size_t m, const uint32_t* positions, const void* host_src, size_t elem_bytes,
                       void* dst, StreamHandle stream) = 0;
  // dst + positions[j] * elem_bytes = the j-th element of `host_src` (j < m), with `positions` in
  // the fast table's memory; ordered on `stream`. elem_bytes is 1 or a multiple of 4.
  virtual void scatter_to(size_t m, const uint32_t* positions, const void* host_src,
                          size_t elem_bytes, void* dst, StreamHandle stream) = 0;
  // at[j] = the last i < n with keys[i] == want[j], or ~0u when there is none (j < m; keys in the
  // fast table's memory, want and at on the host); done when this returns.
  virtual void last_positions(size_t n, const uint64_t* keys, size_t m, const uint64_t* want,
                              uint32_t* at, StreamHandle stream) = 0;
  // flags[i] = false where keys[i] is one of sorted[0, m) (ascending); ordered on `stream`.
  virtual void clear_flags_of(size_t n, const uint64_t* keys, const uint64_t* sorted, size_t m,
                              bool* flags, StreamHandle stream) = 0;
  // Row index[j] of `rows` (dim words each, the fast table's memory) = the initializer's row of
  // keys[j] (j < m; index and keys in host memory); ordered on `stream`.
  virtual void initial_rows(size_t m, const uint32_t* index, const uint64_t* keys,
                            const InitializerOptions& init, uint32_t dim, float* rows,
                            StreamHandle stream) = 0;
  // Rows [first, m) of `rows` (dim words each) = the initializer's rows of keys[first, m) (both in
  // the fast table's memory); ordered on `stream`.
  virtual void initial_rows_from(size_t first, size_t m, const uint64_t* keys,
                                 const InitializerOptions& init, uint32_t dim, float* rows,
                                 StreamHandle stream) = 0;
  // values + positions[j] * dim = *rows[j] (dim floats) where rows[j] is not null (j < m; positions
  // and rows in the fast table's memory); ordered on `stream`.
  virtual void copy_rows_to(size_t m, const uint32_t* positions, float* const* rows, uint32_t dim,
                            float* values, StreamHandle stream) = 0;
  // values[i] = *rows[i] (dim floats) where rows[i] is not null; ordered on `stream`.
  virtual void copy_rows_out(size_t n, float* const* rows, uint32_t dim, float* values,
                             StreamHandle stream) = 0;
  // values[i] = *rows[i] (dim floats) where rows[i] is not null, else the initializer's row of
  // keys[i] (8-byte bit patterns) where that key is not reserved: the rows out of a call whose
  // misses go in with their initial rows, in one pass. With founds (else null): founds[i] =
  // whether rows[i] is not null or keys[i] occurs at an earlier position with a null row (every
  // key at a null row but reserved ones is in stage_new_keys' set, which keeps its first
  // position). All in the fast table's memory, ordered on `stream`.
  virtual void copy_rows_or_initial(size_t n, float* const* rows, const uint64_t* keys,
                                    const InitializerOptions& init, uint32_t dim, float* values,
                                    bool* founds, const uint64_t* set, size_t set_slots,
                                    StreamHandle stream) = 0;
  // Adds the count of i < n with found[i] false to a running total in the fast table's memory,
  // ordered on `stream`: nothing is read back.
  virtual void count_missing(size_t n, const bool* found, StreamHandle stream) = 0;
  // The running total of count_missing (waits for the device).
  virtual uint64_t missing_total() = 0;
  // Why stage_new_keys leaves the keys to the host (bits of status[kStageWhy]).
  static constexpr uint64_t kReservedMissed = 1;  // a missed key is reserved
  static constexpr uint64_t kMaybeBelow = 2;      // the filter may hold a missed key below
  static constexpr uint64_t kOverCap = 4;         // more distinct missed keys than `cap`
  // Indices of stage_new_keys' status words.
  static constexpr size_t kStageDistinct = 0;  // distinct usable missed keys
  static constexpr size_t kStageInsert = 1;    // how many to insert on the device (all or 0)
  static constexpr size_t kStageWhy = 2;       // why none (bits above)
  static constexpr size_t kStageEvicted = 3;   // left for insert_and_evict_counted's count
  static constexpr size_t kStageMissed = 4;    // missed positions (copies and reserved included)
  static constexpr size_t kStageWords = 5;
  // The distinct keys at the positions i < n where found[i] is false (8-byte bit patterns) into
  // unique[0, u) (unique holds n entries), gathered by hashing them into `set`
  // (staged_set_bytes(n) bytes, set_slots = staged_set_slots(n)): unique in any order on CUDA
  // (ascending on the CPU, which leaves `set` alone), each key's index in unique kept in the set
  // for clear_flags_of_staged, mark_repeats and copy_rows_or_initial; with status
  // (kStageWords words) as above: status[kStageInsert] = u when none is reserved, the filter (if
  // any) holds none of them and u <= cap, else 0. Everything stays in the fast table's memory:
  // nothing is read back.
  virtual void stage_new_keys(size_t n, const uint64_t* keys, const bool* found, size_t cap,
                              uint64_t* unique, uint64_t* status, uint64_t* set, size_t set_slots,
                              StreamHandle stream) = 0;
  // flags[i] = false where keys[i] is one of the u keys stage_new_keys gathered into unique and
  // set; ordered on `stream`.
  virtual void clear_flags_of_staged(size_t n, const uint64_t* keys, const uint64_t* unique,
                                     size_t u, const uint64_t* set, size_t set_slots, bool* flags,
                                     StreamHandle stream) = 0;
  // For each i < n with found[i] false: found[i] = whether keys[i] occurs at an earlier position
  // (every such key is one of stage_new_keys' u keys, its list `unique` and set); `first` is
  // scratch of u entries. All in the fast table's memory, ordered on `stream`.
  virtual void mark_repeats(size_t n, const uint64_t* keys, bool* found, const uint64_t* unique,
                            size_t u, uint32_t* first, const uint64_t* set, size_t set_slots,
                            StreamHandle stream) = 0;
  // dst[i] = value where found[i] is false (i < n); ordered on `stream`.
  virtual void fill_missing(size_t n, const bool* found, uint64_t value, uint64_t* dst,
                            StreamHandle stream) = 0;
  // Starts copying `words` (at most kStageWords) 8-byte words of the fast table's memory to the
  // host, ordered on `stream`; take_words waits for that copy and returns them.
  virtual void post_words(const uint64_t* src, size_t words, StreamHandle stream) = 0;
  virtual void take_words(uint64_t* host, size_t words) = 0;
  // The stream prefetch works on (nullptr on the CPU).
  virtual StreamHandle side_stream() = 0;
  // Records `mark` at the end of the work issued on `stream` so far.
  virtual void record(Mark mark, StreamHandle stream) = 0;
  // Makes `stream` wait for the last record(mark) (nothing when none).
  virtual void wait(StreamHandle stream, Mark mark) = 0;
  // Makes `waiter` wait for the work issued on `stream` so far.
  virtual void order_after(StreamHandle waiter, StreamHandle stream) = 0;
  // Waits on the host for the work issued on `stream`.
  virtual void synchronize(StreamHandle stream) = 0;
};

// Slots of the set stage_new_keys hashes the missed keys of n keys into (a power of two, at
// least twice n), and its bytes (a key, its first missed position and its index a slot).
size_t staged_set_slots(size_t n);
inline size_t staged_set_bytes(size_t n) {
  return staged_set_slots(n) * 16;
}

// The CPU implementation (host memory, loops).
std::unique_ptr<TierDevice> make_cpu_tier_device();
// The CUDA implementation on `device` (NotAvailable in builds without CUDA).
std::unique_ptr<TierDevice> make_cuda_tier_device(int device);

// The implementation for `backend`.
inline std::unique_ptr<TierDevice> make_tier_device(Backend backend, int device) {
  return backend == Backend::kCpu ? make_cpu_tier_device() : make_cuda_tier_device(device);
}

}  // namespace dynemb::storage::detail

// The hash table contract: one interface, a CPU and a CUDA implementation behind it.
// docs/table_contract.md is the full statement of every promise made here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stats.hpp"
#include "dynemb/core/stream.hpp"

namespace dynemb {

// A score predicate for erase_if.
enum class ScoreCompare : uint8_t { kLess, kLessEqual, kGreater, kGreaterEqual, kEqual };

struct ScorePredicate {
  ScoreCompare compare = ScoreCompare::kLess;
  uint64_t threshold = 0;
};

// True when `score` satisfies the predicate.
constexpr bool matches(ScorePredicate p, uint64_t score) {
  switch (p.compare) {
    case ScoreCompare::kLess:
      return score < p.threshold;
    case ScoreCompare::kLessEqual:
      return score <= p.threshold;
    case ScoreCompare::kGreater:
      return score > p.threshold;
    case ScoreCompare::kGreaterEqual:
      return score >= p.threshold;
    case ScoreCompare::kEqual:
    default:
      return score == p.threshold;
  }
}

// A batch-oriented hash table of key -> (float row of `dim`, uint64 score).
//
// Pointers are host memory for the CPU backend and device-accessible memory (device, pinned or
// managed) for the CUDA backend, where every call is ordered on `stream`. Value buffers are
// row-major [n x dim]. Optional outputs/inputs may be nullptr. n == 0 is a no-op; a null
// required pointer with n > 0 is InvalidArgument. Calls are safe from several threads.
template <TableKey K>
class Table {
 public:
  using key_type = K;
  virtual ~Table() = default;

  // --- reads: never change contents or scores -------------------------------------------------

  // For each key: copies its row to values[i] and sets founds[i]; rows of missing keys are left
  // as they were. scores[i] receives the stored score (unchanged where missing).
  virtual void find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
                    StreamHandle stream = nullptr) = 0;

  // Like find, and writes the missing keys and their batch positions compactly (in batch
  // order); returns how many were missing (synchronizes the stream on CUDA).
  virtual size_t find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                                  uint64_t* missed_indices, uint64_t* scores,
                                  StreamHandle stream = nullptr) = 0;

  // Sets founds[i] (required) to whether keys[i] is stored.
  virtual void contains(size_t n, const K* keys, bool* founds, StreamHandle stream = nullptr) = 0;

  // find without copying: rows[i] is the address of the key's row in the table's memory
  // (device or mapped host memory on CUDA), nullptr for a missing or reserved key. An address
  // stays valid until the next call that writes to the table (any insert, erase, clear, growth).
  virtual void find_pointers(size_t n, const K* keys, float** rows, bool* founds,
                             uint64_t* scores = nullptr, StreamHandle stream = nullptr) = 0;

  // --- writes ---------------------------------------------------------------------------------

  // Copies each key's row to values[i], first inserting missing keys with the initializer's
  // row. founds[i] (optional) tells which keys existed before the call. A refused key's
  // initial row is still written to values[i] (and counted as refused); a skipped reserved key
  // (WARNING / IGNORE) gets founds[i] = false and no row (values[i] is left as it was).
  virtual void find_or_insert(size_t n, const K* keys, float* values, bool* founds,
                              const uint64_t* scores = nullptr, StreamHandle stream = nullptr) = 0;

  // find_or_insert with the caller's rows for missing keys (HKV's find_or_insert): values is
  // read and written. A missing key is inserted with values[i] as its row, which stays in
  // values[i]; a stored key's row is copied to values[i]. A refused or reserved key leaves
  // values[i] as given. founds[i] (optional) tells which keys existed before the call.
  virtual void find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                                    const uint64_t* scores = nullptr,
                                    StreamHandle stream = nullptr) = 0;

  // find_or_insert without copying: rows[i] is the address of the key's row in the table's
  // memory, new keys' rows holding the initializer's row; nullptr for a refused or reserved
  // key, and for a key this same call inserted and then evicted for a later key. Addresses are
  // valid as find_pointers' are, and the caller may update the rows through them.
  virtual void find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                       const uint64_t* scores = nullptr,
                                       StreamHandle stream = nullptr) = 0;

  // find_or_insert_pointers for a caller that writes the new keys' rows itself: a new key's slot
  // is reserved and its address returned, but its row holds unspecified values (a backend may
  // skip the initializer; this default does not). founds[i] tells which rows must be written.
  virtual void find_or_reserve_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                        const uint64_t* scores = nullptr,
                                        StreamHandle stream = nullptr) {
    find_or_insert_pointers(n, keys, rows, founds, scores, stream);
  }

  // find_or_insert_pointers of the first *count keys (count: backend memory, at most n, written
  // by earlier work on `stream`), for a caller that issues the call without reading the count on
  // the host (a training step, a CUDA graph); entries from *count on are left as they are. This
  // default reads the count (synchronizes the device); a backend may read it on the device.
  virtual void find_or_insert_pointers_counted(size_t n, const uint64_t* count, const K* keys,
                                               float** rows, bool* founds,
                                               StreamHandle stream = nullptr) {
    if (n == 0) return;
    uint64_t m = 0;
    backend_synchronize(backend());
    copy_from_backend(backend(), &m, count, sizeof m);
    find_or_insert_pointers(m < n ? m : n, keys, rows, founds, nullptr, stream);
  }

  // Stores values[i] under keys[i], inserting or overwriting.
  virtual void insert_or_assign(size_t n, const K* keys, const float* values,
                                const uint64_t* scores = nullptr,
                                StreamHandle stream = nullptr) = 0;

  // insert_or_assign that also returns what left the table: each stored key it replaced, and
  // each batch key the policy refused, as (key, row, score) in evicted_*[0, count). Buffers
  // hold n entries; evicted_values and evicted_scores may be nullptr. Skipped reserved keys
  // (WARNING / IGNORE) are not returned. Returns count (synchronizes the stream on CUDA).
  virtual size_t insert_and_evict(size_t n, const K* keys, const float* values,
                                  const uint64_t* scores, K* evicted_keys, float* evicted_values,
                                  uint64_t* evicted_scores, StreamHandle stream = nullptr) = 0;

  // insert_and_evict of the first *count keys (count: backend memory, at most n, written by
  // earlier work on `stream`) for a caller that reads nothing back on the host: how many entries
  // went to evicted_* lands in *evicted_count (backend memory). The buffers hold n entries.
  // `values` may be nullptr: each key's row is then the initializer's (options().initializer),
  // as find_or_insert would give a new key, so the caller need not draw them (a key refused
  // leaves with that row). This default reads the count (synchronizes the device) and draws
  // those rows on the host; a backend may keep everything on the device.
  virtual void insert_and_evict_counted(size_t n, const uint64_t* count, const K* keys,
                                        const float* values, const uint64_t* scores,
                                        K* evicted_keys, float* evicted_values,
                                        uint64_t* evicted_scores, uint64_t* evicted_count,
                                        StreamHandle stream = nullptr) {
    uint64_t m = 0;
    if (n > 0) {
      backend_synchronize(backend());
      copy_from_backend(backend(), &m, count, sizeof m);
    }
    if (m > n) m = n;
    BackendBuffer<float> initial;
    if (values == nullptr && m > 0) {  // the initializer's rows, drawn here
      const uint32_t dim = options().dim;
      std::vector<K> host_keys(m);
      copy_from_backend(backend(), host_keys.data(), keys, m * sizeof(K));
      std::vector<float> rows(m * dim);
      for (size_t i = 0; i < m; ++i)
        fill_initial_row(options().initializer, key_bits(host_keys[i]), rows.data() + i * dim, dim);
      initial = BackendBuffer<float>(backend(), rows.size(), options().device);
      initial.upload(rows.data(), rows.size());
      values = initial.data();
    }
    const uint64_t evicted = m == 0 ? 0
                                    : insert_and_evict(m, keys, values, scores, evicted_keys,
                                                       evicted_values, evicted_scores, stream);
    copy_to_backend(backend(), evicted_count, &evicted, sizeof evicted);
  }

  // Overwrites the rows (and scores) of keys that exist; missing keys are ignored.
  virtual void assign(size_t n, const K* keys, const float* values,
                      const uint64_t* scores = nullptr, StreamHandle stream = nullptr) = 0;

  // Sets the stored score of keys that exist to scores[i]; missing keys are ignored.
  virtual void assign_scores(size_t n, const K* keys, const uint64_t* scores,
                             StreamHandle stream = nullptr) = 0;

  // assign_scores with a hint per key: rows[i] (nullptr: none) is the address find_pointers or
  // find_or_insert_pointers gave for keys[i]. Same result as assign_scores; a backend may write
  // the score at that address's slot when the slot still holds keys[i] instead of looking the
  // key up (a stale hint costs the lookup). This default ignores the hints.
  virtual void assign_scores_at(size_t n, const K* keys, float* const* rows, const uint64_t* scores,
                                StreamHandle stream = nullptr) {
    (void)rows;
    assign_scores(n, keys, scores, stream);
  }

  // Adds values[i] element-wise to the row of keys that exist; inserts missing keys with
  // values[i] as their row.
  virtual void accum_or_assign(size_t n, const K* keys, const float* values,
                               const uint64_t* scores = nullptr, StreamHandle stream = nullptr) = 0;

  // Removes the keys that exist.
  virtual void erase(size_t n, const K* keys, StreamHandle stream = nullptr) = 0;

  // Removes every key whose score matches; returns how many (synchronizes on CUDA).
  virtual size_t erase_if(ScorePredicate predicate, StreamHandle stream = nullptr) = 0;

  // Removes every key; capacity is kept.
  virtual void clear(StreamHandle stream = nullptr) = 0;

  // --- whole-table ----------------------------------------------------------------------------

  // Number of stored keys (synchronizes on CUDA).
  virtual size_t size(StreamHandle stream = nullptr) const = 0;
  // Current number of slots.
  virtual size_t capacity() const = 0;
  // size() / capacity().
  virtual double load_factor(StreamHandle stream = nullptr) const = 0;
  // Grows (by doubling) until capacity >= new_capacity, bounded by max_capacity; no key lost.
  virtual void reserve(size_t new_capacity, StreamHandle stream = nullptr) = 0;

  // Copies out the stored keys among slots [offset, offset + n_slots), compactly, with their
  // rows and scores; with min_score only keys whose score >= *min_score. Returns how many were
  // written (synchronizes on CUDA). values is required, scores optional. Slots at or past
  // capacity() are not read (offset >= capacity() returns 0). Walking offset = 0, n_slots,
  // 2 n_slots, ... up to capacity() visits every key exactly once if the table is not modified.
  virtual size_t export_batch(size_t offset, size_t n_slots, K* keys, float* values,
                              uint64_t* scores, std::optional<uint64_t> min_score = std::nullopt,
                              StreamHandle stream = nullptr) = 0;

  // A read-only view of one stored row.
  using RowVisitor = std::function<void(K key, std::span<const float> value, uint64_t score)>;
  // Calls `visit` on every stored row (host memory views; on CUDA rows are staged to the host).
  virtual void for_each(const RowVisitor& visit) = 0;

  // --- scores ---------------------------------------------------------------------------------

  // The table's current clock: the step (STEP), the call-level score (CUSTOMIZED); for
  // TIMESTAMP the last time read; unused by LFU.
  virtual uint64_t score() const = 0;
  // Sets the step (STEP) or the call-level score (CUSTOMIZED) used when no per-key scores are
  // given. Logs a warning if a CUSTOMIZED score goes backwards.
  virtual void set_score(uint64_t score) = 0;
  // STEP: advances the step by one (once per training step).
  virtual void advance_step() = 0;

  // --- description ----------------------------------------------------------------------------

  virtual const TableOptions& options() const = 0;
  virtual Backend backend() const = 0;
  virtual TableStats stats() const = 0;
  uint32_t dim() const { return options().dim; }
};

// Creates a table on `backend` (NotAvailable if that backend is not built in); validates
// `options` first.
template <TableKey K>
std::unique_ptr<Table<K>> make_table(Backend backend, const TableOptions& options);

// True when this binary has the CUDA backend and a CUDA device is visible.
bool cuda_backend_available();

// The CUDA devices this process sees (0 without the CUDA backend or a device).
int cuda_device_count();

}  // namespace dynemb

// Caching mode: a fast table (the CPU table on the CPU backend, the CUDA table in HBM on the GPU
// backend) in front of a Storage, behind the Table interface, so a trainable Embedding runs on
// it unchanged (docs/storage.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dynemb/storage/storage.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::storage {

namespace detail {
class TierDevice;
class PhaseClock;
}  // namespace detail

// Host wall time of the caching table's device-path calls (find_or_insert*, prefetch*), by phase,
// in nanoseconds, cumulative: where a call's time goes. A phase that ends by waiting for the
// device includes the device work issued before it (docs/storage.md, "Where a call's time goes").
struct CachingPhaseTimes {
  uint64_t calls = 0;          // device-path calls timed (prefetches included)
  uint64_t lookup_ns = 0;      // the fast-tier lookup and the miss list read back
  uint64_t misses_ns = 0;      // the misses' distinct keys, slots, new rows and scores (host)
  uint64_t lower_read_ns = 0;  // the misses read from the lower tier (and pending rows)
  uint64_t insert_ns = 0;      // rows up, pins and insert_and_evict, until its count is read
  uint64_t evicted_ns = 0;     // the evictions read back and sorted out
  uint64_t write_down_ns = 0;  // evictions written to the lower tier
  uint64_t outputs_ns = 0;     // rows, founds, addresses and scores handed out, scores restored
  uint64_t total_ns = 0;       // the calls, whole
};

// Options of a caching table beyond its fast tier's.
struct CachingOptions {
  // The lower tier is this table's alone: nothing else writes it while the table uses it. The
  // table then keeps, in the fast tier's memory, a filter of the keys that may be below (every key
  // it writes down, and the store's keys at construction, read once by a scan), so a missed key
  // the filter has never seen gets its new row without a lower-tier read (docs/storage.md,
  // "Keys stored nowhere"). A row another writer puts below meanwhile may be shadowed by a new
  // one; leave it false for a shared store.
  bool private_store = false;
  uint32_t filter_log2_bits = 27;  // the filter's size (16 MiB); in [10, 32]
  // With private_store: prefetch_step may run wholly on the device when the filter shows every
  // missed key is stored nowhere (docs/storage.md, "A prefetch staged on the device"); false
  // keeps the host path for every prefetch.
  bool stage_prefetch_on_device = true;
  // The most keys one call is expected to pass (like a maximum batch size); 0: none. The
  // device path's buffers (find_or_insert*, prefetch, prefetch_step: scratch in the fast table's
  // memory, pinned host rows and staging) are then sized at construction for a call of that
  // many keys, so no such call allocates (caching_stats().buffer_growths stays 0); a larger call
  // still works and grows them. It pins about 8 * keys * dim + 192 * keys bytes of host
  // memory and takes about 12 * keys * dim + 300 * keys bytes of the fast table's memory
  // (docs/storage.md, "Buffers reserved at construction").
  uint64_t max_call_keys = 0;
};

// Counts of a caching table, per tier (cumulative since construction; pending_rows is now).
struct CachingStats {
  uint64_t lookups = 0;     // keys per call, summed (distinct ones; on the device path a key
                            // found in the fast tier counts at each of its positions)
  uint64_t hits = 0;        // ... found in the fast tier
  uint64_t misses = 0;      // ... not in the fast tier
  uint64_t lower_hits = 0;  // misses found in the lower tier
  uint64_t new_rows = 0;    // misses given a new row (initializer or the caller's)
  uint64_t filtered = 0;  // misses a private store's filter showed stored nowhere (not read below)
  uint64_t prefetched = 0;  // rows brought up by prefetch()
  uint64_t rows_up = 0;     // rows moved from the lower tier into the fast tier
  uint64_t bytes_up = 0;
  uint64_t rows_down = 0;  // rows written to the lower tier (evictions and flush)
  uint64_t bytes_down = 0;
  uint64_t evictions_written = 0;  // rows that left the fast tier and were written down
  uint64_t flushed_rows = 0;       // rows flush() wrote down (they stay in the fast tier)
  uint64_t batch_evicted = 0;      // keys of a call's own batch pushed out of the fast tier by
                                   // later keys of that call (pointer calls give them nullptr)
  uint64_t unsynced_calls = 0;     // address calls after prefetch_step: no host synchronization
  uint64_t unserved = 0;  // keys a call after prefetch_step looked up that it had not brought up
  uint64_t staged_prefetches = 0;  // prefetch_steps run on the device without a host wait
  uint64_t staged_fallbacks = 0;   // ... that brought nothing up (a missed key may be below, a
                                   // reserved key, more new keys than their buffers): the next
                                   // call finds the misses itself
  uint64_t staged_calls = 0;       // find_or_insert* calls over a private store whose misses all
                                   // went in on the device ("A call whose misses are all new")
  uint64_t staged_call_fallbacks = 0;  // ... tried that listed their misses on the host instead
                                       // (a missed key may be below, or is reserved)
  uint64_t prefetch_refused = 0;       // rows a prefetch left below: their bucket was full of the
                                       // keys in use and the batch's own
  uint64_t lower_failures = 0;         // lower-tier calls that threw
  uint64_t pending_rows = 0;           // rows held in host memory until the lower tier takes them
  uint64_t lower_wait_ns = 0;          // time spent waiting for the lower tier
  uint64_t buffer_growths = 0;  // buffers of the device path allocated or grown after construction
                                // (none for calls within CachingOptions::max_call_keys)
  CachingPhaseTimes phases{};   // the device path's time by phase
  TableStats fast{};            // the fast table's own counts
  StorageStats lower{};         // the lower tier's own counts
};

// A Table whose rows live in two tiers: the fast table and a Storage below it. Every stored key
// has its row in the fast tier or else below it (after flush() a fast row also has a copy below;
// the fast row is the current one). A miss is read from below (or gets a new row) and moves up;
// a row the fast table evicts, or refuses, is written down before the call returns. The
// logical contents are those of one table holding every row; only the lower tier's own policy
// (a full HostStorage) drops rows, counted in stats().evictions.
//
// When the lower tier fails, the call throws StorageError and no row is lost: rows that could
// not be written down wait in host memory (caching_stats().pending_rows) and are written before
// the next call that writes; reads see them. Every call takes one lock (calls are serialized).
// Pointers (keys, values, rows) are in the backend's memory, as for any Table.
template <TableKey K>
class CachedTable final : public Table<K> {
 public:
  // `fast` shapes the fast tier, allocated at its max_capacity; lower->row_dim() must equal
  // fast.dim. Throws InvalidArgument otherwise.
  // `caching`: see CachingOptions (InvalidArgument for a filter size out of range).
  CachedTable(Backend backend, const TableOptions& fast, std::shared_ptr<Storage> lower,
              const CachingOptions& caching = {});
  ~CachedTable() override;

  // --- caching ---
  // Brings the keys' rows found below up into the fast tier (no new rows, scores kept). On CUDA
  // it works on a stream of the table's own, after the work issued so far on `stream` (where
  // the keys are ready; nullptr: the default stream) and after the table's last call, not after
  // later work on that call's stream: issued after a training step, it overlaps the step. The
  // rows handed out by the last address call stay where they are (docs/storage.md).
  // `create`: keys stored nowhere get their new row now (the initializer's, as the next
  // find_or_insert would give them), so that call finds every key in the fast tier; that next
  // find_or_insert* call still reports them as not found before it (every occurrence), and the
  // call after it no longer does.
  void prefetch(size_t n, const K* keys, StreamHandle stream = nullptr, bool create = false);
  // prefetch(keys, stream, create = true) for the next training step, whose
  // find_or_insert_pointers then runs without any host synchronization: that call must look up
  // only these keys (a key it did not bring up gets no row, nullptr, counted in
  // caching_stats().unserved). When the prefetch could not place every key (prefetch_refused),
  // or a reserved key was skipped, the next call takes the synchronizing path instead.
  // Over a private store it is staged on the device when it can be (its missed keys all stored
  // nowhere): nothing is waited for, the table's next call settles it (docs/storage.md, "A
  // prefetch staged on the device"); `keys` must stay unchanged until that call begins.
  void prefetch_step(size_t n, const K* keys, StreamHandle stream = nullptr);
  // Starts reading the keys' rows from the lower tier on a host thread and returns; the rows move
  // up at the first call that finds the read done (or that must wait: flush, clear, another
  // prefetch). Rows written or erased below meanwhile are not moved up (they are read again when
  // needed). For overlapping the next batch's reads with the current step.
  void prefetch_async(size_t n, const K* keys, StreamHandle stream = nullptr);
  // Waits for a prefetch_async in flight and moves its rows up.
  void wait_prefetch();
  // Writes every pending row and every fast-tier row down, then flushes the lower tier.
  void flush();
  // The counts so far, per tier.
  CachingStats caching_stats() const;
  Table<K>& fast_table() { return *fast_; }
  Storage& lower() { return *lower_; }

  // --- Table ---
  void find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
            StreamHandle stream = nullptr) override;
  size_t find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                          uint64_t* missed_indices, uint64_t* scores,
                          StreamHandle stream = nullptr) override;
  void contains(size_t n, const K* keys, bool* founds, StreamHandle stream = nullptr) override;
  void find_pointers(size_t n, const K* keys, float** rows, bool* founds,
                     uint64_t* scores = nullptr, StreamHandle stream = nullptr) override;
  void find_or_insert(size_t n, const K* keys, float* values, bool* founds,
                      const uint64_t* scores = nullptr, StreamHandle stream = nullptr) override;
  void find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                            const uint64_t* scores = nullptr,
                            StreamHandle stream = nullptr) override;
  void find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                               const uint64_t* scores = nullptr,
                               StreamHandle stream = nullptr) override;
  void insert_or_assign(size_t n, const K* keys, const float* values,
                        const uint64_t* scores = nullptr, StreamHandle stream = nullptr) override;
  // Nothing leaves a caching table but what the lower tier's own policy drops (not returned
  // here: counted in stats().evictions); returns 0.
  size_t insert_and_evict(size_t n, const K* keys, const float* values, const uint64_t* scores,
                          K* evicted_keys, float* evicted_values, uint64_t* evicted_scores,
                          StreamHandle stream = nullptr) override;
  void assign(size_t n, const K* keys, const float* values, const uint64_t* scores = nullptr,
              StreamHandle stream = nullptr) override;
  void assign_scores(size_t n, const K* keys, const uint64_t* scores,
                     StreamHandle stream = nullptr) override;
  void accum_or_assign(size_t n, const K* keys, const float* values,
                       const uint64_t* scores = nullptr, StreamHandle stream = nullptr) override;
  void erase(size_t n, const K* keys, StreamHandle stream = nullptr) override;
  size_t erase_if(ScorePredicate predicate, StreamHandle stream = nullptr) override;
  void clear(StreamHandle stream = nullptr) override;
  // Rows in either tier (walks the lower tier: RocksDB and Redis count by scanning).
  size_t size(StreamHandle stream = nullptr) const override;
  // Slots of the fast tier plus one slot per row below (see export_batch).
  size_t capacity() const override;
  double load_factor(StreamHandle stream = nullptr) const override;
  void reserve(size_t new_capacity, StreamHandle stream = nullptr) override;
  // Slots [0, fast capacity) are the fast table's; slot fast capacity + j is the j-th row of
  // the lower tier in its scan order (rows whose key is in the fast tier are skipped). Walking
  // the offsets in order scans the lower tier once; pending rows are written down first.
  size_t export_batch(size_t offset, size_t n_slots, K* keys, float* values, uint64_t* scores,
                      std::optional<uint64_t> min_score = std::nullopt,
                      StreamHandle stream = nullptr) override;
  void for_each(const typename Table<K>::RowVisitor& visit) override;
  uint64_t score() const override { return clock_.load(); }
  void set_score(uint64_t score) override;
  void advance_step() override { clock_.fetch_add(1); }
  const TableOptions& options() const override { return options_; }
  Backend backend() const override { return backend_; }
  // The fast table's counts, with evictions = rows the lower tier's policy dropped.
  TableStats stats() const override;

 private:
  struct Pending {
    std::vector<float> row;
    uint64_t score = 0;
    bool erased = false;  // the key moved up: its copy below must be erased
  };
  struct Resolved;
  struct Prefetch;  // a prefetch_async in flight
  enum class Miss : uint8_t { kSkip, kInitialize, kGiven };
  // Fills the real scores of keys a caller pinned outside commit (the hits of its batch).
  using RealScores = std::function<void(const std::vector<K>&, std::vector<uint64_t>&)>;

  std::vector<K> download_keys(size_t n, const K* keys) const;
  // find_or_insert on the fast table's memory (every policy but LFU): one lookup on the device,
  // the misses listed, read below and moved up in batches; nothing else crosses to the host.
  void find_or_insert_device(size_t n, const K* keys, float* values, bool* founds,
                             const uint64_t* scores, float** rows, Miss miss, bool copy_out,
                             StreamHandle stream);
  // Who a prefetch_device works for: the caller's prefetch (counted in prefetched) or a read of
  // the table. Both run after the work issued on the caller's stream (nullptr: the default one).
  enum class PrefetchFor : uint8_t { kCaller, kRead };
  // prefetch on the fast table's memory, on the device's own stream; true when every key of the
  // batch is up afterwards.
  bool prefetch_device(size_t n, const K* keys, StreamHandle stream, bool create,
                       PrefetchFor purpose);
  // find_or_insert_device over a private store whose misses the filter shows all stored nowhere:
  // listed, given their new rows and moved in on the device after one read of their count;
  // false (nothing changed) when some may be below or are reserved, then the host lists them.
  bool find_or_insert_new(size_t n, const K* keys, float* values, bool* founds, float** rows,
                          bool copy_out, float** ptrs, bool* found, const uint64_t* call_scores,
                          uint64_t now, size_t created_on_device,
                          const std::vector<uint64_t>& created, detail::PhaseClock& clock,
                          StreamHandle stream);
  // prefetch_step left on the device (a private store, nothing pending): the batch's keys stored
  // nowhere get their new rows and go in without any host wait; the table's next call settles it
  // (settle_prefetch). Returns false when it cannot run that way (then the caller takes
  // prefetch_device).
  bool prefetch_on_device(size_t n, const K* keys, StreamHandle stream);
  // Settles a prefetch left on the device: waits for it, reads its status, writes down what it
  // evicted, counts; a prefetch that could not place its keys on the device brought nothing up
  // and ends the next call's trust. Every call starts with it (through settle).
  void settle_prefetch(StreamHandle stream);
  // founds[i] = false where keys[i] is one of the `created` keys the last device prefetch
  // created (kDeferNew, and its set when it hashed them).
  void clear_created_on_device(size_t n, const K* keys, size_t created, bool* founds,
                               StreamHandle stream);
  // Sizes every buffer of the device path for calls of up to n keys
  // (CachingOptions::max_call_keys).
  void reserve_buffers(size_t n);
  // settle_prefetch for the const readers (size, capacity, stats): a lower-tier failure leaves the
  // rows pending and is not thrown here.
  void settle_for_reading(StreamHandle stream) const;
  // n scores of "pinned" in the fast table's memory: the highest, or (below_held) one lower,
  // which cannot evict a held key.
  const uint64_t* pinned_scores(size_t n, StreamHandle stream, bool below_held = false);
  // Keeps the keys of an address call pinned (so a prefetch before the next call cannot evict
  // the rows the caller works on) and remembers their real scores.
  void hold(size_t n, const K* keys, const uint64_t* scores, StreamHandle stream);
  // At the start of every call but prefetch: gives the held keys their real scores back and
  // forgets which rows the last prefetch created.
  void settle(StreamHandle stream);
  // Reads the rows of `keys` (distinct, not in the fast tier) from the pending rows and the
  // lower tier: below[j], scores[j], and the rows, returned (the device side's miss rows,
  // keys.size() of them): key j's row is row row_of[j] (each key its own); rows of keys not found
  // are unspecified. `maybe` (when not null): per key, whether it
  // may be below (the filter's answer); keys that may not are not asked.
  float* read_below(const std::vector<uint64_t>& keys, std::vector<uint8_t>& below,
                    std::vector<uint64_t>& scores, std::vector<uint32_t>& row_of,
                    const std::vector<uint8_t>* maybe = nullptr);
  // Moves the keys' rows found below into the fast tier with their scores; returns how many.
  size_t move_up(size_t n, const K* keys, StreamHandle stream);
  // Moves a finished prefetch_async's rows up (waiting for it when `wait`).
  void install_prefetched(bool wait);
  // Records that these keys were written or erased below (a prefetch in flight must not move
  // their rows up).
  void note_below(const std::vector<uint64_t>& keys);
  void drain_pending();
  Resolved resolve(const std::vector<K>& unique, bool want_fast_rows);
  // Stores rows (keys[i] -> rows + i * dim, scores[i]) in the fast tier with the call's keys
  // pinned, gives touch_keys their scores, and writes every row that left down (erasing below
  // the moved_up keys that stayed); `initial` marks rows drawn on the device instead of read from
  // `rows`, `pinned_hits` gives the real scores of keys the caller pinned; `absent`: none of
  // `keys` is in the fast tier (the device path's misses), so there is nothing to pin first.
  // `left_fast` (when not null) gets the keys of `keys` that left the fast tier again.
  // `rows_at` (when not null): key i's row is row rows_at[i] of `rows` (host_rows memory, read
  // in place by the device), for the keys before the rows drawn on the device.
  void commit(const std::vector<K>& keys, const float* rows, const std::vector<uint64_t>& scores,
              const std::vector<K>& touch_keys, const std::vector<uint64_t>& touch_scores,
              const std::vector<K>& moved_up, std::vector<K>* left_fast, StreamHandle stream,
              bool below_held = false, const RealScores* pinned_hits = nullptr,
              const std::vector<uint8_t>* initial = nullptr, bool absent = false,
              const std::vector<uint32_t>* rows_at = nullptr);
  // Writes put_keys.size() rows (put_rows: row-major) and the erases down, or keeps them
  // pending when the lower tier fails (rethrowing while it stays down).
  void write_down(const std::vector<uint64_t>& put_keys, const float* put_rows,
                  const std::vector<uint64_t>& put_scores, const std::vector<uint64_t>& erase_keys,
                  bool flushing);
  uint64_t clock_now() const;
  void find_or_insert_impl(size_t n, const K* keys, float* values, bool* founds,
                           const uint64_t* scores, float** rows, Miss miss, bool copy_out,
                           StreamHandle stream);
  void write_rows_impl(size_t n, const K* keys, const float* values, const uint64_t* scores,
                       bool insert_missing, bool accumulate);

  Backend backend_;
  uint32_t dim_;
  CachingOptions caching_;
  TableOptions options_;  // as given (the fast table is CUSTOMIZED and IGNORE: see the .cpp)
  mutable std::atomic<uint64_t> clock_{0};  // the STEP step, CUSTOMIZED score, last TIMESTAMP
  std::unique_ptr<Table<K>> fast_;
  std::shared_ptr<Storage> lower_;
  mutable std::recursive_mutex mutex_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::unordered_set<uint64_t> shadowed_;  // fast keys with a copy below (after flush)
  CachingStats stats_{};
  std::unique_ptr<Prefetch> prefetch_;
  std::unique_ptr<detail::TierDevice> device_;  // scratch, copies and passes on the fast memory
  size_t pinned_filled_[2] = {0, 0};            // entries of the pinned-score scratches filled
  size_t held_ = 0;                             // keys held pinned since the last address call
  std::vector<uint64_t> created_;  // keys the last prefetch gave new rows (sorted), until a call
  bool trusted_ = false;           // the next address call may skip the miss count (prefetch_step)
  // A prefetch left on the device, until the next call settles it.
  struct DeviceStage {
    bool active = false;
    size_t n = 0;          // its batch's keys
    size_t cap = 0;        // rows it could insert
    size_t set_slots = 0;  // slots of its set of missed keys (kDeferSet)
  };
  DeviceStage stage_{};
  size_t stage_cap_ = 4096;          // rows a prefetch left on the device can insert (grows to fit)
  uint32_t stage_backoff_ = 0;       // prefetch_steps to take the host path after one fell back
  uint32_t stage_call_backoff_ = 0;  // calls to list their misses on the host after one fell back
  size_t created_on_device_ = 0;     // keys the last device prefetch created (kDeferNew)
  size_t created_set_slots_ = 0;     // ... in its set (kDeferSet)
  uint64_t growths_at_start_ = 0;    // the device side's buffer growths once constructed

  // export_batch's position in the lower tier's scan.
  ScanCursor export_cursor_;
  uint64_t export_next_ = ~0ull;
};

// A caching table as a Table pointer (for Embedding's table factory).
template <TableKey K>
std::unique_ptr<Table<K>> make_cached_table(Backend backend, const TableOptions& fast,
                                            std::shared_ptr<Storage> lower,
                                            const CachingOptions& caching = {}) {
  return std::make_unique<CachedTable<K>>(backend, fast, std::move(lower), caching);
}

}  // namespace dynemb::storage

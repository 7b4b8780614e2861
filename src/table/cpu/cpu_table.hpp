// The CPU backend of Table<K>: buckets of SwissTable-style slots (bucket_storage.hpp), one spin
// lock per bucket, a table-wide shared_mutex that only growth takes exclusively, and a thread
// pool that splits large batches. docs/cpu_table.md explains the design.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "cpu/bucket_storage.hpp"
#include "cpu/lock_stripes.hpp"
#include "cpu/refusal_log.hpp"
#include "cpu/reserved_keys.hpp"
#include "cpu/score_clock.hpp"
#include "cpu/slot_budget.hpp"
#include "cpu/spin_lock.hpp"
#include "dynemb/core/thread_pool.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::table::cpu {

// What a key's operation asks of the batch driver: nothing more, or grow the table and retry
// (because one more key would pass the load factor, or because the key's bucket is full).
enum class Step : uint8_t { kDone, kGrowForLoad, kGrowForFullBucket };

// Whether a batch operation only reads rows (prefetched for reading) or may write them.
enum class Access : uint8_t { kRead, kWrite };

// One key of a batch as the driver hands it to an operation, its bucket locked: `probe` is the
// bucket's current answer for the key.
struct KeyAt {
  size_t index;
  uint64_t bits;
  uint64_t hash;
  uint64_t bucket;
  Probe probe;
  SlotBudget* budget;
};

template <TableKey K>
class CpuTable final : public Table<K> {
 public:
  // An empty table shaped by `options` (already validated).
  explicit CpuTable(const TableOptions& options);

  void find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
            StreamHandle stream) override;
  size_t find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                          uint64_t* missed_indices, uint64_t* scores, StreamHandle stream) override;
  void contains(size_t n, const K* keys, bool* founds, StreamHandle stream) override;
  void find_pointers(size_t n, const K* keys, float** rows, bool* founds, uint64_t* scores,
                     StreamHandle stream) override;
  void find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                               const uint64_t* scores, StreamHandle stream) override;
  void find_or_insert(size_t n, const K* keys, float* values, bool* founds, const uint64_t* scores,
                      StreamHandle stream) override;
  void find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                            const uint64_t* scores, StreamHandle stream) override;
  void insert_or_assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                        StreamHandle stream) override;
  size_t insert_and_evict(size_t n, const K* keys, const float* values, const uint64_t* scores,
                          K* evicted_keys, float* evicted_values, uint64_t* evicted_scores,
                          StreamHandle stream) override;
  void assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
              StreamHandle stream) override;
  void assign_scores(size_t n, const K* keys, const uint64_t* scores, StreamHandle stream) override;
  void accum_or_assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                       StreamHandle stream) override;
  void erase(size_t n, const K* keys, StreamHandle stream) override;
  size_t erase_if(ScorePredicate predicate, StreamHandle stream) override;
  void clear(StreamHandle stream) override;

  size_t size(StreamHandle stream) const override;
  size_t capacity() const override;
  double load_factor(StreamHandle stream) const override;
  void reserve(size_t new_capacity, StreamHandle stream) override;
  size_t export_batch(size_t offset, size_t n_slots, K* keys, float* values, uint64_t* scores,
                      std::optional<uint64_t> min_score, StreamHandle stream) override;
  void for_each(const typename Table<K>::RowVisitor& visit) override;

  uint64_t score() const override { return clock_.value(); }
  void set_score(uint64_t score) override;
  void advance_step() override;

  const TableOptions& options() const override { return options_; }
  Backend backend() const override { return Backend::kCpu; }
  TableStats stats() const override;

 private:
  // Keys per pipelined chunk: all are hashed and prefetched before the first is handled.
  static constexpr size_t kChunk = 32;
  // How much of a probably full bucket's entries pass 2 prefetches (for the eviction scan).
  static constexpr size_t kFullBucketPrefetchBytes = 4096;
  // Batches at least this long are split over the pool.
  static constexpr size_t kParallelMin = 16384;
  // Keys per pool task, and the most tasks per thread: tasks small enough that the threads
  // finish together (a 2^20-key batch on 16 threads makes 512 tasks of 2048 keys, well under a
  // millisecond each), large enough that handing one out costs next to nothing.
  static constexpr size_t kTaskKeys = 2048;
  static constexpr size_t kMaxTasksPerThread = 64;

  // Throws InvalidArgument when `ptr` is null while n > 0.
  static void require_pointer(const void* ptr, const char* call, const char* argument);
  // find without the pointer checks; `call` names the operation in errors.
  void find_rows(const char* call, size_t n, const K* keys, float* values, bool* founds,
                 uint64_t* scores);
  // find_pointers without the checks: rows[i] (and founds[i], scores[i] when set); reserved
  // keys are noted in `reserved` when set.
  void find_row_pointers(size_t n, const K* keys, float** rows, bool* founds, uint64_t* scores,
                         ReservedKeys* reserved);
  // ERROR: throws on the first reserved key (in parallel for large batches), nothing changed.
  // WARNING / IGNORE: nothing here; the call's workers note the reserved keys they skip in a
  // ReservedKeys, and report_reserved publishes them.
  void screen_reserved(const char* call, size_t n, const K* keys);
  // Adds the reserved keys a call skipped to stats() and, WARNING, logs them once.
  void report_reserved(const char* call, const K* keys, const ReservedKeys& reserved);

  // Calls visit(key, storage) with key.bucket locked for every non-reserved key, and
  // on_reserved(i) for reserved ones; grows and retries a key whose visit asks for it.
  // Keys go in chunks through three passes: hash and prefetch the first control group;
  // predict the slot from it (no lock) and prefetch that slot's key, score and row; then lock,
  // probe and visit, by now mostly from cache. Large batches run on the pool.
  template <Access access, class Visit, class OnReserved>
  void for_keys(size_t n, const K* keys, Visit&& visit, OnReserved&& on_reserved);
  // Calls fn(begin, end) over ranges covering [0, n), on the pool for large n.
  template <class Fn>
  void for_key_ranges(size_t n, Fn&& fn);
  template <Access access, class Visit, class OnReserved>
  void visit_range(size_t begin, size_t end, const K* keys, Visit& visit, OnReserved& on_reserved);

  // The insert-or-update of one key (bucket locked); `hooks` write rows and outputs.
  template <class Hooks>
  Step upsert(const KeyAt& key, const BucketStorage& s, const ScoreInputs& in, RefusalLog& refusals,
              Hooks& hooks);
  // Runs an insert-type call: screens keys, runs upsert with `hooks`, reports refusals.
  template <class Hooks>
  void run_upserts(const char* call, size_t n, const K* keys, const uint64_t* scores, Hooks& hooks,
                   bool refusals_returned = false);

  // Doubles capacity (clamped to max_capacity) unless someone grew past `seen` already, or,
  // for_load, unless one more key fits after all (other workers' size claims returned).
  void grow_from(uint64_t seen_capacity, bool for_load);
  // One growth step; the caller holds mutex_ exclusively.
  void grow_locked();

  // Faults in a new storage's memory on the pool (options_.prefault_host_memory).
  void fault_in(const BucketStorage& s);

  // Calls fn(first, last) over bucket ranges, in parallel for large tables.
  template <class Fn>
  void for_bucket_ranges(uint64_t num_buckets, Fn&& fn);

  TableOptions options_;
  size_t row_bytes_;
  core::ThreadPool pool_;
  ScoreClock clock_;
  LockStripes locks_;                       // the bucket locks
  mutable std::shared_mutex mutex_;         // shared: every call; exclusive: growth, clear
  std::unique_ptr<BucketStorage> storage_;  // replaced only under exclusive mutex_
  uint64_t grow_threshold_ = 0;             // floor(max_load_factor * capacity), under mutex_
  std::atomic<uint64_t> size_{0};
  std::atomic<uint64_t> capacity_{0};
  std::atomic<uint64_t> evictions_{0}, refused_{0}, reserved_keys_{0}, rehashes_{0}, erased_{0};
};

// ---- the batch driver ------------------------------------------------------------------------

template <TableKey K>
template <class Fn>
void CpuTable<K>::for_key_ranges(size_t n, Fn&& fn) {
  const uint32_t threads = pool_.threads();
  if (n < kParallelMin || threads == 1) {
    fn(size_t{0}, n);
    return;
  }
  const size_t tasks = std::min<size_t>(threads * kMaxTasksPerThread, n / kTaskKeys);
  pool_.run(tasks, [&](size_t t) { fn(n * t / tasks, n * (t + 1) / tasks); });
}

template <TableKey K>
template <Access access, class Visit, class OnReserved>
void CpuTable<K>::for_keys(size_t n, const K* keys, Visit&& visit, OnReserved&& on_reserved) {
  for_key_ranges(n, [&](size_t begin, size_t end) {
    visit_range<access>(begin, end, keys, visit, on_reserved);
  });
}

template <TableKey K>
template <Access access, class Visit, class OnReserved>
void CpuTable<K>::visit_range(size_t begin, size_t end, const K* keys, Visit& visit,
                              OnReserved& on_reserved) {
  constexpr bool kWrite = access == Access::kWrite;
  std::shared_lock lock(mutex_);
  SlotBudget budget(size_, erased_);
  KeyAt at[kChunk];
  size_t i = begin;
  while (i < end) {
    const BucketStorage& s = *storage_;
    const size_t count = std::min(kChunk, end - i);
    for (size_t j = 0; j < count; ++j) {  // pass 1: hash, prefetch the control group
      KeyAt& k = at[j];
      k.index = i + j;
      k.bits = key_bits(keys[i + j]);
      k.hash = hash_key_bits(k.bits);
      k.bucket = s.bucket_of(k.hash);
      k.budget = &budget;
      s.prefetch_ctrl(k.bucket, k.hash);
      locks_.prefetch(k.bucket);
    }
    for (size_t j = 0; j < count; ++j) {  // pass 2: guess the slot, prefetch what it holds
      const KeyAt& k = at[j];
      const int32_t slot = s.predict_slot(k.bucket, k.hash, kWrite);
      if (slot >= 0) {
        s.prefetch_slot(k.bucket, static_cast<uint32_t>(slot), kWrite);
      } else if (slot == -2) {
        s.prefetch_entries(k.bucket, kFullBucketPrefetchBytes);
      }
    }
    size_t j = 0;
    bool grow_for_load = false;
    for (; j < count; ++j) {  // pass 3: the operation
      KeyAt& k = at[j];
      if (k.bits >= kFirstReservedKey) {
        on_reserved(k.index);
        continue;
      }
      uint32_t& word = locks_.of_bucket(k.bucket);
      lock_word(word);
      k.probe = s.find_or_free(k.bucket, k.bits, k.hash);
      const Step step = visit(k, s);
      unlock_word(word);
      if (step != Step::kDone) {
        grow_for_load = step == Step::kGrowForLoad;
        break;
      }
    }
    if (j < count) {  // grow, then start a new chunk at the key that asked for it
      const uint64_t seen = s.capacity();
      budget.release();
      lock.unlock();
      grow_from(seen, grow_for_load);
      lock.lock();
    }
    i += j;
  }
}

template <TableKey K>
template <class Fn>
void CpuTable<K>::for_bucket_ranges(uint64_t num_buckets, Fn&& fn) {
  const uint32_t threads = pool_.threads();
  const uint64_t min_buckets = std::max<uint64_t>(1, kParallelMin / options_.bucket_capacity);
  if (threads == 1 || num_buckets < 2 * min_buckets) {
    fn(uint64_t{0}, num_buckets);
    return;
  }
  const uint64_t tasks = std::min<uint64_t>(threads * 4, num_buckets / min_buckets);
  pool_.run(tasks, [&](size_t t) { fn(num_buckets * t / tasks, num_buckets * (t + 1) / tasks); });
}

}  // namespace dynemb::table::cpu

// The CUDA backend of Table<K>: host-side orchestration of the kernels (see docs/cuda_table.md).
// Every call enqueues its work on the caller's stream. It synchronizes only where the contract
// returns a count, where it may throw (safe_check ERROR, WARNING logs), and while the table can
// still grow (to learn whether a key was deferred to after a growth).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "arguments.hpp"
#include "cuda/call_scratch.hpp"
#include "cuda/deferred_reports.hpp"
#include "cuda/device_layout.hpp"
#include "cuda/stream_order.hpp"
#include "cuda/table_storage.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::table::cuda {

// A batch of keys as the kernels see them: 64-bit patterns.
template <class K>
const uint64_t* bits_of(const K* keys) {
  return reinterpret_cast<const uint64_t*>(keys);
}

// The caller's stream handle as a CUDA stream.
inline cudaStream_t to_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

using detail::require_pointer;

template <TableKey K>
class CudaTable final : public Table<K> {
 public:
  // An empty table shaped by `options` (already validated) on options.device.
  explicit CudaTable(const TableOptions& options);
  ~CudaTable() override;

  // --- reads (cuda_table_reads.cpp) -------------------------------------------------------------

  void find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
            StreamHandle stream) override;
  size_t find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                          uint64_t* missed_indices, uint64_t* scores, StreamHandle stream) override;
  void contains(size_t n, const K* keys, bool* founds, StreamHandle stream) override;
  void find_pointers(size_t n, const K* keys, float** rows, bool* founds, uint64_t* scores,
                     StreamHandle stream) override;

  // --- writes (cuda_table_writes.cpp) -----------------------------------------------------------

  void find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                               const uint64_t* scores, StreamHandle stream) override;
  void find_or_reserve_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                const uint64_t* scores, StreamHandle stream) override;
  // On the device where the table's writes allow it (no growth, no LFU two passes, no ERROR
  // check): the locked kernel covers min(*count, n) keys; else the base's (reads the count).
  void find_or_insert_pointers_counted(size_t n, const uint64_t* count, const K* keys, float** rows,
                                       bool* founds, StreamHandle stream) override;
  void find_or_insert(size_t n, const K* keys, float* values, bool* founds, const uint64_t* scores,
                      StreamHandle stream) override;
  void find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                            const uint64_t* scores, StreamHandle stream) override;
  void insert_or_assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                        StreamHandle stream) override;
  size_t insert_and_evict(size_t n, const K* keys, const float* values, const uint64_t* scores,
                          K* evicted_keys, float* evicted_values, uint64_t* evicted_scores,
                          StreamHandle stream) override;
  void insert_and_evict_counted(size_t n, const uint64_t* count, const K* keys, const float* values,
                                const uint64_t* scores, K* evicted_keys, float* evicted_values,
                                uint64_t* evicted_scores, uint64_t* evicted_count,
                                StreamHandle stream) override;
  void assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
              StreamHandle stream) override;
  void assign_scores(size_t n, const K* keys, const uint64_t* scores, StreamHandle stream) override;
  // Hinted slots written without a probe (IGNORE mode; ERROR and WARNING take assign_scores, whose
  // checks and reports they need).
  void assign_scores_at(size_t n, const K* keys, float* const* rows, const uint64_t* scores,
                        StreamHandle stream) override;
  void accum_or_assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                       StreamHandle stream) override;
  void erase(size_t n, const K* keys, StreamHandle stream) override;

  // --- whole table (cuda_table.cpp) -------------------------------------------------------------

  size_t erase_if(ScorePredicate predicate, StreamHandle stream) override;
  void clear(StreamHandle stream) override;
  size_t size(StreamHandle stream) const override;
  size_t capacity() const override { return capacity_.load(); }
  double load_factor(StreamHandle stream) const override;
  void reserve(size_t new_capacity, StreamHandle stream) override;
  size_t export_batch(size_t offset, size_t n_slots, K* keys, float* values, uint64_t* scores,
                      std::optional<uint64_t> min_score, StreamHandle stream) override;
  void for_each(const typename Table<K>::RowVisitor& visit) override;

  // --- scores -----------------------------------------------------------------------------------

  uint64_t score() const override;
  void set_score(uint64_t score) override;
  void advance_step() override { step_.fetch_add(1); }

  // --- description ------------------------------------------------------------------------------

  const TableOptions& options() const override { return options_; }
  Backend backend() const override { return Backend::kCuda; }
  TableStats stats() const override;

 private:
  bool error_mode() const { return options_.safe_check == SafeCheck::kError; }
  // Whether a counted call (its count in device memory) can run without reading anything on the
  // host: growth, LFU's two passes and ERROR's check read the call's state there anyway.
  bool counted_on_device() const {
    return storage_.capacity() >= options_.max_capacity &&
           options_.score_policy != ScorePolicy::kLfu && !error_mode();
  }

  ReadArgs read_args(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
                     CallState* state, float** row_ptrs = nullptr) const;

  // find / contains: asynchronous in IGNORE and WARNING modes (WARNING logs at a later call), one
  // synchronization to report in ERROR mode.
  void lookup(const char* call, size_t n, const K* keys, float* values, bool* founds,
              uint64_t* scores, cudaStream_t s, float** row_ptrs = nullptr);

  // Whether the policy's scores come from the device timer (TIMESTAMP): such a table keeps score
  // bounds, and relies on them from creation and clear() until a call passes caller scores.
  bool timer_policy() const { return options_.score_policy == ScorePolicy::kTimestamp; }

  // The value written into new scores as the table's clock for this call.
  uint64_t clock_for_write();

  // Inserts left before size() would exceed max_load_factor * capacity() (before the size).
  long long load_limit() const;

  // The writes that store the caller's rows (insert_or_assign, assign, accum_or_assign).
  void store_rows(const char* call, WriteOp op, size_t n, const K* keys, const float* values,
                  const uint64_t* scores, cudaStream_t s);

  // Runs a write op, growing and retrying deferred keys while the table can grow; for
  // find_or_insert_pointers, then looks up again the addresses the call may have made stale.
  CallState write(const char* call, WriteOp op, size_t n, const K* keys, WriteArgs a,
                  cudaStream_t s);

  // Whether a write of n keys on stream s runs once per distinct key
  // (TableOptions::coalesce_copies_min_batch and the ops and scores it covers).
  bool coalesces_copies(WriteOp op, const WriteArgs& a, size_t n, cudaStream_t s) const;

  // Whether a write's copies of a key that meet at a taken bucket lock take the result of the
  // copy that claimed their key (TableOptions::join_contended_copies and the ops and scores it
  // covers).
  bool joins_copies(WriteOp op, const WriteArgs& a) const;

  // After find_or_insert_pointers: a growth moved rows, and at max capacity a later key of the
  // batch may have evicted a row this call inserted; then the addresses are looked up again (keys
  // no longer stored get nullptr). Without a growth the lookup runs only if the call evicted a row
  // (the kernel reads the call's eviction count: no host synchronization).
  // counted (optional, device memory): the caller's count of keys
  // (find_or_insert_pointers_counted), at most n.
  void refresh_row_ptrs(size_t n, const K* keys, const WriteArgs& a, bool grew, cudaStream_t s,
                        const unsigned long long* counted = nullptr);

  // Launches `op` over a's batch: grouped by bucket (one tile per bucket, no locks) when the
  // batch is large and its length known on the host, else key by key under bucket locks.
  void launch_write_op(WriteOp op, WriteArgs a, cudaStream_t s);

  // Doubles the capacity by rehashing into new storage (caller holds the write lock).
  void grow_once(cudaStream_t s);

  // Raises or logs what a call's state reports: a reserved key (ERROR: InvalidArgument; the
  // table is unchanged), skipped reserved keys (WARNING), refusals (ERROR: InsertRefused, except
  // for a call that hands refused rows back, insert_and_evict, where ERROR warns instead).
  void report(const char* call, const CallState& st, const uint64_t* keys, cudaStream_t s,
              bool refusals_returned = false) const;

  std::string refused_message(const char* call, const CallState& st) const;

  // Logs a call's skipped reserved keys (WARNING) and refusals (WARNING; ERROR where the call
  // handed the refused rows back).
  void warn_for(const char* call, const CallState& st) const;

  TableOptions options_;
  DeviceStats* stats_ = nullptr;
  std::unique_ptr<WriteState> write_state_;  // every write's call state
  uint32_t multiprocessors_ = 0;             // the device's SMs (sizes subset grids)
  TableStorage storage_;
  std::atomic<uint64_t> capacity_{0};
  std::atomic<uint64_t> rehashes_{0};
  std::atomic<uint64_t> step_{0};
  std::atomic<uint64_t> custom_{0};
  std::atomic<uint64_t> last_time_{0};
  // Every stored score came from the device timer (TIMESTAMP, no caller scores since the table
  // was created or cleared), so evictions may search through the score bounds (victim.cuh).
  std::atomic<bool> timer_scores_only_{false};
  mutable StreamOrder order_;
  // WARNING mode's reports, null in the other modes (declared last: destroyed first, while
  // options_ is still there).
  std::unique_ptr<DeferredReports> reports_;
};

}  // namespace dynemb::table::cuda

// CudaTable: the batch writes (find_or_insert*, insert_or_assign, insert_and_evict, assign*,
// accum_or_assign, erase) and the driver they share: grow and retry deferred keys, group large
// batches by bucket, report what the call's state says.
#include <limits>

#include "cuda/bucket_order.hpp"
#include "cuda/cuda_table.hpp"
#include "cuda/duplicate_keys.hpp"
#include "cuda/kernels.hpp"
#include "dynemb/core/cuda/device_guard.hpp"

namespace dynemb::table::cuda {
namespace {

// Whether `stream` is capturing a CUDA graph.
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  core::cuda::check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

template <TableKey K>
void CudaTable<K>::find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                           const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require_pointer(rows, "find_or_insert_pointers", "rows");
  WriteArgs a;
  a.row_ptrs = rows;
  a.founds = founds;
  a.scores_in = scores;
  write("find_or_insert_pointers", WriteOp::kFindOrInsertPointers, n, keys, a, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::find_or_reserve_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                            const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require_pointer(rows, "find_or_reserve_pointers", "rows");
  WriteArgs a;
  a.row_ptrs = rows;
  a.founds = founds;
  a.scores_in = scores;
  a.init_new_rows = false;
  write("find_or_reserve_pointers", WriteOp::kFindOrInsertPointers, n, keys, a, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::find_or_insert_pointers_counted(size_t n, const uint64_t* count, const K* keys,
                                                   float** rows, bool* founds,
                                                   StreamHandle stream) {
  if (n == 0) return;
  if (!counted_on_device())
    return Table<K>::find_or_insert_pointers_counted(n, count, keys, rows, founds, stream);
  require_pointer(rows, "find_or_insert_pointers_counted", "rows");
  require_pointer(count, "find_or_insert_pointers_counted", "count");
  WriteArgs a;
  a.row_ptrs = rows;
  a.founds = founds;
  a.n_device = reinterpret_cast<const unsigned long long*>(count);
  write("find_or_insert_pointers", WriteOp::kFindOrInsertPointers, n, keys, a, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::find_or_insert(size_t n, const K* keys, float* values, bool* founds,
                                  const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require_pointer(values, "find_or_insert", "values");
  WriteArgs a;
  a.values_out = values;
  a.founds = founds;
  a.scores_in = scores;
  write("find_or_insert", WriteOp::kFindOrInsert, n, keys, a, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                                        const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require_pointer(values, "find_or_insert_given", "values");
  WriteArgs a;
  a.values_in = values;
  a.values_out = values;
  a.founds = founds;
  a.scores_in = scores;
  write("find_or_insert_given", WriteOp::kFindOrInsertGiven, n, keys, a, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::insert_or_assign(size_t n, const K* keys, const float* values,
                                    const uint64_t* scores, StreamHandle stream) {
  store_rows("insert_or_assign", WriteOp::kInsertOrAssign, n, keys, values, scores,
             to_stream(stream));
}

template <TableKey K>
size_t CudaTable<K>::insert_and_evict(size_t n, const K* keys, const float* values,
                                      const uint64_t* scores, K* evicted_keys,
                                      float* evicted_values, uint64_t* evicted_scores,
                                      StreamHandle stream) {
  if (n == 0) return 0;
  require_pointer(values, "insert_and_evict", "values");
  require_pointer(evicted_keys, "insert_and_evict", "evicted_keys");
  WriteArgs a;
  a.values_in = values;
  a.scores_in = scores;
  a.evicted_keys = reinterpret_cast<uint64_t*>(evicted_keys);
  a.evicted_values = evicted_values;
  a.evicted_scores = evicted_scores;
  return write("insert_and_evict", WriteOp::kInsertAndEvict, n, keys, a, to_stream(stream)).emitted;
}

template <TableKey K>
void CudaTable<K>::insert_and_evict_counted(size_t n, const uint64_t* count, const K* keys,
                                            const float* values, const uint64_t* scores,
                                            K* evicted_keys, float* evicted_values,
                                            uint64_t* evicted_scores, uint64_t* evicted_count,
                                            StreamHandle stream) {
  if (!counted_on_device() || n == 0)
    return Table<K>::insert_and_evict_counted(n, count, keys, values, scores, evicted_keys,
                                              evicted_values, evicted_scores, evicted_count,
                                              stream);
  require_pointer(count, "insert_and_evict_counted", "count");
  require_pointer(evicted_keys, "insert_and_evict_counted", "evicted_keys");
  require_pointer(evicted_count, "insert_and_evict_counted", "evicted_count");
  WriteArgs a;
  a.values_in = values;
  a.scores_in = scores;
  a.n_device = reinterpret_cast<const unsigned long long*>(count);
  a.evicted_keys = reinterpret_cast<uint64_t*>(evicted_keys);
  a.evicted_values = evicted_values;
  a.evicted_scores = evicted_scores;
  a.emitted_out = reinterpret_cast<unsigned long long*>(evicted_count);
  // values null: the initializer's rows, drawn in the kernel (docs/table_contract.md).
  write("insert_and_evict",
        values != nullptr ? WriteOp::kInsertAndEvict : WriteOp::kInsertAndEvictInitial, n, keys, a,
        to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                          StreamHandle stream) {
  store_rows("assign", WriteOp::kAssign, n, keys, values, scores, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::assign_scores(size_t n, const K* keys, const uint64_t* scores,
                                 StreamHandle stream) {
  if (n == 0) return;
  require_pointer(scores, "assign_scores", "scores");
  WriteArgs a;
  a.scores_in = scores;
  write("assign_scores", WriteOp::kAssignScores, n, keys, a, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::assign_scores_at(size_t n, const K* keys, float* const* rows,
                                    const uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  if (error_mode() || reports_ != nullptr) return assign_scores(n, keys, scores, stream);
  require_pointer(keys, "assign_scores_at", "keys");
  require_pointer(rows, "assign_scores_at", "rows");
  require_pointer(scores, "assign_scores_at", "scores");
  const cudaStream_t s = to_stream(stream);
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Write guard(order_, s);
  timer_scores_only_ = false;  // as for any caller scores (write())
  launch_assign_scores_at(storage_.view(), bits_of(keys), rows, scores, n, s);
}

template <TableKey K>
void CudaTable<K>::accum_or_assign(size_t n, const K* keys, const float* values,
                                   const uint64_t* scores, StreamHandle stream) {
  if (n > 0) table::detail::require_float32_rows(options_, "accum_or_assign");
  store_rows("accum_or_assign", WriteOp::kAccumOrAssign, n, keys, values, scores,
             to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::erase(size_t n, const K* keys, StreamHandle stream) {
  if (n == 0) return;
  write("erase", WriteOp::kErase, n, keys, WriteArgs{}, to_stream(stream));
}

// ---- the write driver ------------------------------------------------------------------------

template <TableKey K>
void CudaTable<K>::store_rows(const char* call, WriteOp op, size_t n, const K* keys,
                              const float* values, const uint64_t* scores, cudaStream_t s) {
  if (n == 0) return;
  require_pointer(values, call, "values");
  WriteArgs a;
  a.values_in = values;
  a.scores_in = scores;
  write(call, op, n, keys, a, s);
}

template <TableKey K>
CallState CudaTable<K>::write(const char* call, WriteOp op, size_t n, const K* keys, WriteArgs a,
                              cudaStream_t s) {
  require_pointer(keys, call, "keys");
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Write guard(order_, s);
  const WriteState::Use scratch(*write_state_, s);
  a.keys = bits_of(keys);
  a.n = n;
  a.state = scratch.get();
  // The caller's count (find_or_insert_pointers_counted), kept apart from the n_device an LFU
  // table's second pass sets below.
  const unsigned long long* counted = a.n_device;
  // Caller scores may sit below a group's score bound: from now on evictions scan buckets.
  if (a.scores_in != nullptr) timer_scores_only_ = false;
  a.policy = options_.score_policy;
  a.clock = clock_for_write();
  a.skip_reserved = !error_mode();
  a.init = options_.initializer;
  if (error_mode()) launch_reserved_check(a.keys, n, a.state, s);

  // find_or_insert_pointers: each key is looked for without the lock first, in the same kernel
  // (docs/cuda_table.md). LFU tables take two passes instead (the lock-free one over every key,
  // then the locked one over the keys it did not find): a count must add every copy of a key,
  // and within one kernel a copy's lock-free touch could land before another copy's insert
  // stores the key's first count.
  const bool pointers = op == WriteOp::kFindOrInsertPointers;
  const bool two_passes = pointers && options_.score_policy == ScorePolicy::kLfu;
  a.lock_free_first = pointers && !two_passes;
  DeviceArray<uint32_t> missed, touch_order;
  if (two_passes && n <= 0xFFFFFFFFull) {
    missed = DeviceArray<uint32_t>(n, s);
    TouchArgs t;
    t.keys = a.keys;
    if (visits_in_bucket_order(storage_.view(), n)) {
      touch_order = positions_by_bucket(storage_.view(), a.keys, nullptr, n, s);
      t.subset = touch_order.data();
    }
    t.n = n;
    t.values_out = a.values_out;
    t.row_ptrs = a.row_ptrs;
    t.founds = a.founds;
    t.scores_in = a.scores_in;
    t.policy = a.policy;
    t.clock = a.clock;
    t.skip_reserved = a.skip_reserved;
    t.missed_out = missed.data();
    t.state = a.state;
    launch_find_and_touch(storage_.view(), t, s);
    a.subset = missed.data();
    a.n_device = &a.state->missed;
  }

  // Copies of a key: the op runs on one owner per distinct key, the copies take its result
  // after the call (docs/cuda_table.md, "Copies of a key in one call").
  // A caller's count on the device bounds the search (the keys past it are not the call's) and
  // keeps the owners' count there too: the op runs over the listed owners, nothing read on the
  // host.
  std::optional<KeyOwners> owners;
  if (coalesces_copies(op, a, n, s)) {
    owners = find_key_owners(a.keys, nullptr, n,
                             /*last_wins=*/op == WriteOp::kInsertOrAssign || op == WriteOp::kAssign,
                             s, counted);
  }
  if (owners && counted != nullptr) {
    a.subset = owners->owners.data();
    a.n_device = owners->count.data();
  } else if (owners) {
    unsigned long long distinct = 0;
    core::cuda::check(cudaMemcpyAsync(&distinct, owners->count.data(), sizeof(distinct),
                                      cudaMemcpyDeviceToHost, s),
                      "cudaMemcpyAsync (distinct keys)");
    core::cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (distinct keys)");
    if (distinct >= n) {
      owners.reset();  // no copies: the batch as given
    } else {
      a.subset = owners->owners.data();
      a.n = distinct;
    }
  }

  // Copies of a key that meet at a taken bucket lock take the result of the copy that holds or
  // waits for it (docs/cuda_table.md, "Copies of a key in one call").
  if (joins_copies(op, a)) a.joins = write_state_->joins();

  DeviceArray<uint32_t> deferred[2];
  a.growable = op_inserts(op) && storage_.capacity() < options_.max_capacity;
  if (a.growable) {
    require(n <= 0xFFFFFFFFull, call, "n", std::to_string(n),
            "must be < 2^32 while the table can grow");
    deferred[0] = DeviceArray<uint32_t>(n, s);
    deferred[1] = DeviceArray<uint32_t>(n, s);
    a.deferred_out = deferred[0].data();
    launch_reset_retry(a.state, load_limit(), s, write_state_->joins());
    launch_count_size(storage_.view(), a.state, s);
  }
  launch_write_op(op, a, s);

  CallState st{};
  bool have_state = false;
  int current = 0;
  bool grew = false;
  while (a.growable) {
    st = scratch.read();
    have_state = true;
    if (st.reserved_position != kNoPosition || st.deferred == 0) break;
    grow_once(s);
    grew = true;
    a.subset = deferred[current].data();
    a.n = st.deferred;
    a.n_device = nullptr;
    current ^= 1;
    a.deferred_out = deferred[current].data();
    a.growable = storage_.capacity() < options_.max_capacity;
    launch_reset_retry(a.state, a.growable ? load_limit() : 0, s, write_state_->joins());
    if (a.growable) launch_count_size(storage_.view(), a.state, s);
    launch_write_op(op, a, s);
    have_state = false;
  }
  if (owners) {
    // Every copy takes its owner's output; if the call refused a key, the copies go through the
    // op one by one instead (an owner's key may then be missing; a length only the device knows).
    DeviceArray<uint32_t> redo(n, s);
    DeviceArray<unsigned long long> redo_count(1, s);
    core::cuda::check(cudaMemsetAsync(redo_count.data(), 0, sizeof(unsigned long long), s),
                      "cudaMemsetAsync (copies to redo)");
    give_copies_owner_results(*owners, n, storage_.view().dim, a.values_out, a.row_ptrs, a.founds,
                              a.state, redo.data(), redo_count.data(), s, counted);
    a.subset = redo.data();
    a.n = n;
    a.n_device = redo_count.data();
    a.growable = false;
    a.deferred_out = nullptr;
    a.keys_in_flight = 0;
    launch_write_op(op, a, s);
    have_state = false;
  }
  // WARNING without a state read already: the warnings are logged at a later call (no
  // synchronization); ERROR and insert_and_evict (which returns a count) read it now.
  // insert_and_evict_counted leaves its count on the device (copied before the state is reset).
  if (a.emitted_out != nullptr)
    core::cuda::check(cudaMemcpyAsync(a.emitted_out, &a.state->emitted, sizeof(*a.emitted_out),
                                      cudaMemcpyDeviceToDevice, s),
                      "cudaMemcpyAsync (evicted count)");
  const bool evicts = op == WriteOp::kInsertAndEvict || op == WriteOp::kInsertAndEvictInitial;
  const bool must_read = error_mode() || (evicts && a.emitted_out == nullptr);
  const bool warns = reports_ != nullptr;  // WARNING mode
  if (must_read && !have_state) st = scratch.read();
  if (must_read || (warns && have_state)) {
    // The state read waited for this stream: earlier calls' reports on it have landed and go
    // first.
    if (warns) reports_->poll();
    report(call, st, a.keys, s, /*refusals_returned=*/evicts);
  } else if (warns && !capturing(s)) {
    // A call captured into a CUDA graph leaves no report (its event could not be waited on);
    // its counts are in stats() all the same.
    reports_->enqueue(call, a.state, s);
  }
  if (op == WriteOp::kFindOrInsertPointers) refresh_row_ptrs(n, keys, a, grew, s, counted);
  return st;
}

template <TableKey K>
bool CudaTable<K>::coalesces_copies(WriteOp op, const WriteArgs& a, size_t n,
                                    cudaStream_t s) const {
  const bool op_fits = op == WriteOp::kFindOrInsert || op == WriteOp::kFindOrInsertGiven ||
                       op == WriteOp::kFindOrInsertPointers || op == WriteOp::kInsertOrAssign ||
                       op == WriteOp::kAssign;
  // LFU counts every copy and caller scores may differ between copies: those keep the op per
  // copy, as does a call that takes the grouped (batch-order) form. Unset, it is on where a copy
  // holds its lock while a host row is copied: hybrid tables, ops that move rows
  // (find_or_reserve_pointers moves none: its copies hold the lock as briefly as on an HBM table).
  const bool host_rows_under_lock = storage_.view().host_values != nullptr && a.init_new_rows;
  const uint64_t min_batch = options_.coalesce_copies_min_batch.value_or(
      host_rows_under_lock ? kCoalesceCopiesMinBatch : std::numeric_limits<uint64_t>::max());
  if (!op_fits || a.scores_in != nullptr || options_.score_policy == ScorePolicy::kLfu ||
      a.subset != nullptr || n < min_batch || n >= options_.grouped_write_min_batch ||
      n >= (uint64_t{1} << 31))
    return false;
  // The owners' count is read on the host: not while the stream is being captured.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  core::cuda::check(cudaStreamIsCapturing(s, &capture), "cudaStreamIsCapturing");
  return capture == cudaStreamCaptureStatusNone;
}

template <TableKey K>
bool CudaTable<K>::joins_copies(WriteOp op, const WriteArgs& a) const {
  // LFU counts every copy and caller scores may differ between copies: a copy must apply its own.
  const bool op_fits = op == WriteOp::kFindOrInsert || op == WriteOp::kFindOrInsertGiven ||
                       op == WriteOp::kFindOrInsertPointers || op == WriteOp::kInsertOrAssign ||
                       op == WriteOp::kAssign;
  return op_fits && options_.join_contended_copies && a.scores_in == nullptr &&
         options_.score_policy != ScorePolicy::kLfu && a.n <= 0xFFFFFFFFull;
}

template <TableKey K>
void CudaTable<K>::refresh_row_ptrs(size_t n, const K* keys, const WriteArgs& a, bool grew,
                                    cudaStream_t s, const unsigned long long* counted) {
  if (!grew && storage_.capacity() < options_.max_capacity) return;
  // Without a growth nearly every address is still right: each is checked against its slot's
  // key (one load a key) and only the others looked up again.
  if (!grew) {
    launch_verify_row_ptrs(storage_.view(), bits_of(keys), n, a.row_ptrs, &a.state->evictions, s,
                           counted);
    return;
  }
  ReadArgs r = read_args(n, keys, nullptr, nullptr, nullptr, nullptr, a.row_ptrs);
  r.skip_reserved = false;  // counted by the write already
  launch_find(storage_.view(), r, s);
}

template <TableKey K>
void CudaTable<K>::launch_write_op(WriteOp op, WriteArgs a, cudaStream_t s) {
  TableView view = storage_.view();
  if (!timer_scores_only_) view.score_bounds = nullptr;
  const bool grouped = a.n_device == nullptr && a.n > 0 &&
                       a.n >= options_.grouped_write_min_batch && a.n < (1ull << 31) &&
                       view.num_buckets <= (1ull << 32);
  if (!grouped) {
    // Host-resident rows are reached in address order: the keys are visited in bucket order
    // (a length only the device knows keeps the given order).
    DeviceArray<uint32_t> order;
    const bool rows = moves_rows(op) && a.init_new_rows;  // find_or_reserve_pointers moves none
    if (a.n_device == nullptr && rows && visits_in_bucket_order(view, a.n)) {
      order = positions_by_bucket(view, a.keys, a.subset, a.n, s);
      a.subset = order.data();
      a.keys_in_flight = options_.host_keys_in_flight;
      a.host_order = true;
    }
    launch_write(op, view, a, multiprocessors_, s);
    return;
  }
  // The order's arrays are freed in stream order, after the kernel. The tile owning a bucket
  // needs no lock-free look first.
  a.lock_free_first = false;
  const BucketOrder order = group_by_bucket(view, a.keys, a.subset, a.n, s);
  a.subset = order.positions.data();
  a.run_buckets = order.buckets.data();
  a.run_keys = order.keys.data();
  launch_write(op, view, a, multiprocessors_, s);
}

template void CudaTable<int64_t>::find_or_insert_pointers(size_t, const int64_t*, float**, bool*,
                                                          const uint64_t*, StreamHandle);
template void CudaTable<int64_t>::find_or_insert_pointers_counted(size_t, const uint64_t*,
                                                                  const int64_t*, float**, bool*,
                                                                  StreamHandle);
template void CudaTable<int64_t>::find_or_reserve_pointers(size_t, const int64_t*, float**, bool*,
                                                           const uint64_t*, StreamHandle);
template void CudaTable<int64_t>::find_or_insert(size_t, const int64_t*, float*, bool*,
                                                 const uint64_t*, StreamHandle);
template void CudaTable<int64_t>::find_or_insert_given(size_t, const int64_t*, float*, bool*,
                                                       const uint64_t*, StreamHandle);
template void CudaTable<int64_t>::insert_or_assign(size_t, const int64_t*, const float*,
                                                   const uint64_t*, StreamHandle);
template void CudaTable<int64_t>::insert_and_evict_counted(size_t, const uint64_t*, const int64_t*,
                                                           const float*, const uint64_t*, int64_t*,
                                                           float*, uint64_t*, uint64_t*,
                                                           StreamHandle);
template size_t CudaTable<int64_t>::insert_and_evict(size_t, const int64_t*, const float*,
                                                     const uint64_t*, int64_t*, float*, uint64_t*,
                                                     StreamHandle);
template void CudaTable<int64_t>::assign(size_t, const int64_t*, const float*, const uint64_t*,
                                         StreamHandle);
template void CudaTable<int64_t>::assign_scores(size_t, const int64_t*, const uint64_t*,
                                                StreamHandle);
template void CudaTable<int64_t>::assign_scores_at(size_t, const int64_t*, float* const*,
                                                   const uint64_t*, StreamHandle);
template void CudaTable<int64_t>::accum_or_assign(size_t, const int64_t*, const float*,
                                                  const uint64_t*, StreamHandle);
template void CudaTable<int64_t>::erase(size_t, const int64_t*, StreamHandle);
template void CudaTable<uint64_t>::find_or_insert_pointers(size_t, const uint64_t*, float**, bool*,
                                                           const uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::find_or_insert_pointers_counted(size_t, const uint64_t*,
                                                                   const uint64_t*, float**, bool*,
                                                                   StreamHandle);
template void CudaTable<uint64_t>::find_or_reserve_pointers(size_t, const uint64_t*, float**, bool*,
                                                            const uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::find_or_insert(size_t, const uint64_t*, float*, bool*,
                                                  const uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::find_or_insert_given(size_t, const uint64_t*, float*, bool*,
                                                        const uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::insert_or_assign(size_t, const uint64_t*, const float*,
                                                    const uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::insert_and_evict_counted(size_t, const uint64_t*,
                                                            const uint64_t*, const float*,
                                                            const uint64_t*, uint64_t*, float*,
                                                            uint64_t*, uint64_t*, StreamHandle);
template size_t CudaTable<uint64_t>::insert_and_evict(size_t, const uint64_t*, const float*,
                                                      const uint64_t*, uint64_t*, float*, uint64_t*,
                                                      StreamHandle);
template void CudaTable<uint64_t>::assign(size_t, const uint64_t*, const float*, const uint64_t*,
                                          StreamHandle);
template void CudaTable<uint64_t>::assign_scores(size_t, const uint64_t*, const uint64_t*,
                                                 StreamHandle);
template void CudaTable<uint64_t>::assign_scores_at(size_t, const uint64_t*, float* const*,
                                                    const uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::accum_or_assign(size_t, const uint64_t*, const float*,
                                                   const uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::erase(size_t, const uint64_t*, StreamHandle);

}  // namespace dynemb::table::cuda

// The CUDA backend of Table<K>: host-side orchestration of the kernels (see docs/cuda_table.md).
// Every call enqueues its work on the caller's stream. It synchronizes only where the contract
// returns a count, where it may throw (safe_check ERROR, WARNING logs), and while the table can
// still grow (to learn whether a key was deferred to after a growth).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "arguments.hpp"
#include "backends.hpp"
#include "cuda/bucket_order.hpp"
#include "cuda/call_scratch.hpp"
#include "cuda/deferred_reports.hpp"
#include "cuda/kernels.hpp"
#include "cuda/stream_order.hpp"
#include "cuda/table_storage.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#include "dynemb/core/cuda/device_info.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/log.hpp"

namespace dynemb::cuda_table {
namespace {

template <class K>
const uint64_t* bits_of(const K* keys) {
  return reinterpret_cast<const uint64_t*>(keys);
}

cudaStream_t to_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t host_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

using detail::require_pointer;

template <TableKey K>
class CudaTable final : public Table<K> {
 public:
  explicit CudaTable(const TableOptions& options) : options_(options), order_(options.thread_safe) {
    cuda::DeviceGuard device(options_.device);
    cuda::check(cudaMalloc(reinterpret_cast<void**>(&stats_), sizeof(DeviceStats)),
                "cudaMalloc (stats)");
    cuda::check(cudaMemset(stats_, 0, sizeof(DeviceStats)), "cudaMemset (stats)");
    timer_scores_only_ = timer_policy();
    storage_ =
        TableStorage(options_.init_capacity / options_.bucket_capacity, options_.bucket_capacity,
                     options_.dim, options_.max_hbm_for_values, timer_policy(), stats_, nullptr);
    capacity_ = storage_.capacity();
    write_state_ = std::make_unique<WriteState>();
    if (options_.safe_check == SafeCheck::kWarning) {
      reports_ = std::make_unique<DeferredReports>(
          [this](const std::string& call, const CallState& st) { warn_for(call.c_str(), st); });
    }
    multiprocessors_ = cuda::multiprocessors(options_.device);
    cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (construction)");
  }

  ~CudaTable() override {
    cudaDeviceSynchronize();
    storage_ = TableStorage();
    cudaFree(stats_);
  }

  // --- reads ------------------------------------------------------------------------------------

  void find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
            StreamHandle stream) override {
    if (n == 0) return;
    require_pointer(keys, "find", "keys");
    require_pointer(values, "find", "values");
    lookup("find", n, keys, values, founds, scores, to_stream(stream));
  }

  size_t find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                          uint64_t* missed_indices, uint64_t* scores,
                          StreamHandle stream) override {
    if (n == 0) return 0;
    constexpr const char* call = "find_with_misses";
    require_pointer(keys, call, "keys");
    require_pointer(values, call, "values");
    require_pointer(missed_keys, call, "missed_keys");
    require_pointer(missed_indices, call, "missed_indices");
    const cudaStream_t s = to_stream(stream);
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Read guard(order_, s);
    CallScratch scratch(s);
    DeviceArray<bool> founds(n, s);
    if (error_mode()) launch_reserved_check(bits_of(keys), n, scratch.get(), s);
    launch_find(storage_.view(), read_args(n, keys, values, founds.data(), scores, scratch.get()),
                s);
    launch_select_misses(founds.data(), bits_of(keys), n, reinterpret_cast<uint64_t*>(missed_keys),
                         missed_indices, scratch.get(), s);
    const CallState st = scratch.read();
    report(call, st, bits_of(keys), s);
    return st.count;
  }

  void contains(size_t n, const K* keys, bool* founds, StreamHandle stream) override {
    if (n == 0) return;
    require_pointer(keys, "contains", "keys");
    require_pointer(founds, "contains", "founds");
    lookup("contains", n, keys, nullptr, founds, nullptr, to_stream(stream));
  }

  void find_pointers(size_t n, const K* keys, float** rows, bool* founds, uint64_t* scores,
                     StreamHandle stream) override {
    if (n == 0) return;
    require_pointer(keys, "find_pointers", "keys");
    require_pointer(rows, "find_pointers", "rows");
    lookup("find_pointers", n, keys, nullptr, founds, scores, to_stream(stream), rows);
  }

  // --- writes -----------------------------------------------------------------------------------

  void find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                               const uint64_t* scores, StreamHandle stream) override {
    if (n == 0) return;
    require_pointer(rows, "find_or_insert_pointers", "rows");
    WriteArgs a;
    a.row_ptrs = rows;
    a.founds = founds;
    a.scores_in = scores;
    write("find_or_insert_pointers", WriteOp::kFindOrInsert, n, keys, a, to_stream(stream));
  }

  void find_or_insert(size_t n, const K* keys, float* values, bool* founds, const uint64_t* scores,
                      StreamHandle stream) override {
    if (n == 0) return;
    require_pointer(values, "find_or_insert", "values");
    WriteArgs a;
    a.values_out = values;
    a.founds = founds;
    a.scores_in = scores;
    write("find_or_insert", WriteOp::kFindOrInsert, n, keys, a, to_stream(stream));
  }

  void find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                            const uint64_t* scores, StreamHandle stream) override {
    if (n == 0) return;
    require_pointer(values, "find_or_insert_given", "values");
    WriteArgs a;
    a.values_in = values;
    a.values_out = values;
    a.founds = founds;
    a.scores_in = scores;
    write("find_or_insert_given", WriteOp::kFindOrInsertGiven, n, keys, a, to_stream(stream));
  }

  void insert_or_assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                        StreamHandle stream) override {
    store_rows("insert_or_assign", WriteOp::kInsertOrAssign, n, keys, values, scores,
               to_stream(stream));
  }

  size_t insert_and_evict(size_t n, const K* keys, const float* values, const uint64_t* scores,
                          K* evicted_keys, float* evicted_values, uint64_t* evicted_scores,
                          StreamHandle stream) override {
    if (n == 0) return 0;
    require_pointer(values, "insert_and_evict", "values");
    require_pointer(evicted_keys, "insert_and_evict", "evicted_keys");
    WriteArgs a;
    a.values_in = values;
    a.scores_in = scores;
    a.evicted_keys = reinterpret_cast<uint64_t*>(evicted_keys);
    a.evicted_values = evicted_values;
    a.evicted_scores = evicted_scores;
    return write("insert_and_evict", WriteOp::kInsertAndEvict, n, keys, a, to_stream(stream))
        .emitted;
  }

  void assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
              StreamHandle stream) override {
    store_rows("assign", WriteOp::kAssign, n, keys, values, scores, to_stream(stream));
  }

  void assign_scores(size_t n, const K* keys, const uint64_t* scores,
                     StreamHandle stream) override {
    if (n == 0) return;
    require_pointer(scores, "assign_scores", "scores");
    WriteArgs a;
    a.scores_in = scores;
    write("assign_scores", WriteOp::kAssignScores, n, keys, a, to_stream(stream));
  }

  void accum_or_assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                       StreamHandle stream) override {
    store_rows("accum_or_assign", WriteOp::kAccumOrAssign, n, keys, values, scores,
               to_stream(stream));
  }

  void erase(size_t n, const K* keys, StreamHandle stream) override {
    if (n == 0) return;
    write("erase", WriteOp::kErase, n, keys, WriteArgs{}, to_stream(stream));
  }

  size_t erase_if(ScorePredicate predicate, StreamHandle stream) override {
    const cudaStream_t s = to_stream(stream);
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Write guard(order_, s);
    CallScratch scratch(s);
    launch_erase_if(storage_.view(), static_cast<uint8_t>(predicate.compare), predicate.threshold,
                    scratch.get(), s);
    return scratch.read().count;
  }

  void clear(StreamHandle stream) override {
    const cudaStream_t s = to_stream(stream);
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Write guard(order_, s);
    launch_clear(storage_.view(), s);
    timer_scores_only_ = timer_policy();
  }

  // --- whole table ------------------------------------------------------------------------------

  size_t size(StreamHandle stream) const override {
    const cudaStream_t s = to_stream(stream);
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Read guard(order_, s);
    CallScratch scratch(s);
    launch_count_size(storage_.view(), scratch.get(), s);
    return scratch.read().count;
  }

  size_t capacity() const override { return capacity_.load(); }

  double load_factor(StreamHandle stream) const override {
    return static_cast<double>(size(stream)) / static_cast<double>(capacity());
  }

  void reserve(size_t new_capacity, StreamHandle stream) override {
    require(new_capacity <= options_.max_capacity, "reserve", "new_capacity",
            std::to_string(new_capacity),
            "must be <= max_capacity (" + std::to_string(options_.max_capacity) + ")");
    const cudaStream_t s = to_stream(stream);
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Write guard(order_, s);
    while (storage_.capacity() < new_capacity) grow_once(s);
  }

  size_t export_batch(size_t offset, size_t n_slots, K* keys, float* values, uint64_t* scores,
                      std::optional<uint64_t> min_score, StreamHandle stream) override {
    if (n_slots == 0) return 0;
    require_pointer(keys, "export_batch", "keys");
    require_pointer(values, "export_batch", "values");
    const cudaStream_t s = to_stream(stream);
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Read guard(order_, s);
    const uint64_t slots = detail::export_slot_count(offset, n_slots, storage_.capacity());
    if (slots == 0) return 0;
    CallScratch scratch(s);
    launch_export(storage_.view(), offset, slots, min_score.has_value(), min_score.value_or(0),
                  reinterpret_cast<uint64_t*>(keys), values, scores, scratch.get(), s);
    return scratch.read().count;
  }

  void for_each(const typename Table<K>::RowVisitor& visit) override {
    const cudaStream_t s = nullptr;
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Read guard(order_, s);
    const uint64_t cap = storage_.capacity();
    const uint32_t dim = options_.dim;
    const uint64_t chunk =
        std::min<uint64_t>(cap, std::max<uint64_t>(1, (64ull << 20) / (dim * 4 + 16)));
    DeviceArray<uint64_t> d_keys(chunk, s), d_scores(chunk, s);
    DeviceArray<float> d_values(chunk * dim, s);
    std::vector<K> h_keys(chunk);
    std::vector<uint64_t> h_scores(chunk);
    std::vector<float> h_values(chunk * dim);
    for (uint64_t offset = 0; offset < cap; offset += chunk) {
      CallScratch scratch(s);
      launch_export(storage_.view(), offset, std::min(chunk, cap - offset), false, 0, d_keys.data(),
                    d_values.data(), d_scores.data(), scratch.get(), s);
      const uint64_t count = scratch.read().count;
      if (count == 0) continue;
      cuda::check(cudaMemcpy(h_keys.data(), d_keys.data(), count * sizeof(K), cudaMemcpyDefault),
                  "cudaMemcpy (for_each keys)");
      cuda::check(
          cudaMemcpy(h_scores.data(), d_scores.data(), count * sizeof(uint64_t), cudaMemcpyDefault),
          "cudaMemcpy (for_each scores)");
      cuda::check(cudaMemcpy(h_values.data(), d_values.data(), count * dim * sizeof(float),
                             cudaMemcpyDefault),
                  "cudaMemcpy (for_each values)");
      for (uint64_t i = 0; i < count; ++i) {
        visit(h_keys[i], std::span<const float>(h_values.data() + i * dim, dim), h_scores[i]);
      }
    }
  }

  // --- scores -----------------------------------------------------------------------------------

  uint64_t score() const override {
    switch (options_.score_policy) {
      case ScorePolicy::kStep:
        return step_.load();
      case ScorePolicy::kCustomized:
        return custom_.load();
      case ScorePolicy::kTimestamp:
        return last_time_.load();
      case ScorePolicy::kLfu:
      default:
        return 0;
    }
  }

  void set_score(uint64_t score) override {
    if (options_.score_policy == ScorePolicy::kStep) {
      step_.store(score);
    } else if (options_.score_policy == ScorePolicy::kCustomized) {
      const uint64_t old = custom_.exchange(score);
      if (score < old) {
        warn("set_score: customized score goes backwards from " + std::to_string(old) + " to " +
             std::to_string(score));
      }
    }
  }

  void advance_step() override { step_.fetch_add(1); }

  // --- description ------------------------------------------------------------------------------

  const TableOptions& options() const override { return options_; }
  Backend backend() const override { return Backend::kCuda; }

  TableStats stats() const override {
    cuda::DeviceGuard device(options_.device);
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (stats)");
    if (reports_ != nullptr) reports_->flush();
    DeviceStats d{};
    cuda::check(cudaMemcpy(&d, stats_, sizeof d, cudaMemcpyDeviceToHost), "cudaMemcpy (stats)");
    TableStats out;
    out.evictions = d.evictions;
    out.refused = d.refused;
    out.reserved_keys = d.reserved_keys;
    out.erased = d.erased;
    out.rehashes = rehashes_.load();
    return out;
  }

 private:
  bool error_mode() const { return options_.safe_check == SafeCheck::kError; }

  ReadArgs read_args(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
                     CallState* state, float** row_ptrs = nullptr) const {
    ReadArgs a;
    a.keys = bits_of(keys);
    a.n = n;
    a.values = values;
    a.row_ptrs = row_ptrs;
    a.founds = founds;
    a.scores = scores;
    a.skip_reserved = !error_mode();
    a.state = state;
    return a;
  }

  // find / contains: asynchronous in IGNORE and WARNING modes (WARNING logs at a later call), one
  // synchronization to report in ERROR mode.
  void lookup(const char* call, size_t n, const K* keys, float* values, bool* founds,
              uint64_t* scores, cudaStream_t s, float** row_ptrs = nullptr) {
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Read guard(order_, s);
    if (options_.safe_check == SafeCheck::kIgnore) {
      launch_find(storage_.view(), read_args(n, keys, values, founds, scores, nullptr, row_ptrs),
                  s);
      return;
    }
    CallScratch scratch(s);
    if (error_mode()) launch_reserved_check(bits_of(keys), n, scratch.get(), s);
    launch_find(storage_.view(),
                read_args(n, keys, values, founds, scores, scratch.get(), row_ptrs), s);
    if (error_mode()) {
      report(call, scratch.read(), bits_of(keys), s);
    } else {
      reports_->enqueue(call, scratch.get(), s);  // WARNING: logged later, no synchronization
    }
  }

  // Whether the policy's scores come from the device timer (TIMESTAMP): such a table keeps score
  // bounds, and relies on them from creation and clear() until a call passes caller scores.
  bool timer_policy() const { return options_.score_policy == ScorePolicy::kTimestamp; }

  // The value written into new scores as the table's clock for this call.
  uint64_t clock_for_write() {
    switch (options_.score_policy) {
      case ScorePolicy::kStep:
        return step_.load();
      case ScorePolicy::kCustomized:
        return custom_.load();
      case ScorePolicy::kTimestamp: {
        const uint64_t now = host_now_ns();
        last_time_.store(now);
        return now;
      }
      case ScorePolicy::kLfu:
      default:
        return 0;
    }
  }

  // Inserts left before size() would exceed max_load_factor * capacity() (before the size).
  long long load_limit() const {
    return static_cast<long long>(
        std::floor(options_.max_load_factor * static_cast<double>(storage_.capacity())));
  }

  // The writes that store the caller's rows (insert_or_assign, assign, accum_or_assign).
  void store_rows(const char* call, WriteOp op, size_t n, const K* keys, const float* values,
                  const uint64_t* scores, cudaStream_t s) {
    if (n == 0) return;
    require_pointer(values, call, "values");
    WriteArgs a;
    a.values_in = values;
    a.scores_in = scores;
    write(call, op, n, keys, a, s);
  }

  // Runs a write op, growing and retrying deferred keys while the table can grow; for
  // find_or_insert_pointers, then looks up again the addresses the call may have made stale.
  CallState write(const char* call, WriteOp op, size_t n, const K* keys, WriteArgs a,
                  cudaStream_t s) {
    require_pointer(keys, call, "keys");
    cuda::DeviceGuard device(options_.device);
    StreamOrder::Write guard(order_, s);
    const WriteState::Use scratch(*write_state_, s);
    a.keys = bits_of(keys);
    a.n = n;
    a.state = scratch.get();
    // Caller scores may sit below a group's score bound: from now on evictions scan buckets.
    if (a.scores_in != nullptr) timer_scores_only_ = false;
    a.policy = options_.score_policy;
    a.clock = clock_for_write();
    a.skip_reserved = !error_mode();
    a.init = options_.initializer;
    if (error_mode()) launch_reserved_check(a.keys, n, a.state, s);

    // find_or_insert_pointers: a lock-free pass finds the stored keys (address written, score
    // touched); only the keys it did not find go through the locked kernel. Measured: 2.2x
    // faster where nearly every key is stored (a training step's lookup), slower on the table
    // benchmark's 40% new keys, so the copying find_or_insert keeps one locked pass
    // (docs/cuda_table.md).
    DeviceArray<uint32_t> missed;
    if (op == WriteOp::kFindOrInsert && a.row_ptrs != nullptr && n <= 0xFFFFFFFFull) {
      missed = DeviceArray<uint32_t>(n, s);
      TouchArgs t;
      t.keys = a.keys;
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

    DeviceArray<uint32_t> deferred[2];
    a.growable = op_inserts(op) && storage_.capacity() < options_.max_capacity;
    if (a.growable) {
      require(n <= 0xFFFFFFFFull, call, "n", std::to_string(n),
              "must be < 2^32 while the table can grow");
      deferred[0] = DeviceArray<uint32_t>(n, s);
      deferred[1] = DeviceArray<uint32_t>(n, s);
      a.deferred_out = deferred[0].data();
      launch_reset_retry(a.state, load_limit(), s);
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
      launch_reset_retry(a.state, a.growable ? load_limit() : 0, s);
      if (a.growable) launch_count_size(storage_.view(), a.state, s);
      launch_write_op(op, a, s);
      have_state = false;
    }
    // WARNING without a state read already: the warnings are logged at a later call (no
    // synchronization); ERROR and insert_and_evict (which returns a count) read it now.
    const bool must_read = error_mode() || op == WriteOp::kInsertAndEvict;
    const bool warns = reports_ != nullptr;  // WARNING mode
    if (must_read && !have_state) st = scratch.read();
    if (must_read || (warns && have_state)) {
      // The state read waited for this stream: earlier calls' reports on it have landed and go
      // first.
      if (warns) reports_->poll();
      report(call, st, a.keys, s, /*refusals_returned=*/op == WriteOp::kInsertAndEvict);
    } else if (warns) {
      reports_->enqueue(call, a.state, s);
    }
    if (op == WriteOp::kFindOrInsert && a.row_ptrs != nullptr)
      refresh_row_ptrs(n, keys, a, grew, s);
    return st;
  }

  // After find_or_insert_pointers: a growth moved rows, and at max capacity a later key of the
  // batch may have evicted a row this call inserted; then the addresses are looked up again (keys
  // no longer stored get nullptr). Without a growth the lookup runs only if the call evicted a row
  // (the kernel reads the call's eviction count: no host synchronization).
  void refresh_row_ptrs(size_t n, const K* keys, const WriteArgs& a, bool grew, cudaStream_t s) {
    if (!grew && storage_.capacity() < options_.max_capacity) return;
    ReadArgs r = read_args(n, keys, nullptr, nullptr, nullptr, nullptr, a.row_ptrs);
    r.skip_reserved = false;  // counted by the write already
    if (!grew) r.only_if_nonzero = &a.state->evictions;
    launch_find(storage_.view(), r, s);
  }

  // Launches `op` over a's batch: grouped by bucket (one tile per bucket, no locks) when the
  // batch is large and its length known on the host, else key by key under bucket locks.
  void launch_write_op(WriteOp op, WriteArgs a, cudaStream_t s) {
    TableView view = storage_.view();
    if (!timer_scores_only_) view.score_bounds = nullptr;
    const bool grouped = a.n_device == nullptr && a.n > 0 &&
                         a.n >= options_.grouped_write_min_batch && a.n < (1ull << 31) &&
                         view.num_buckets <= (1ull << 32);
    if (!grouped) {
      launch_write(op, view, a, multiprocessors_, s);
      return;
    }
    // The order's arrays are freed in stream order, after the kernel.
    const BucketOrder order = group_by_bucket(view, a.keys, a.subset, a.n, s);
    a.subset = order.positions.data();
    a.run_buckets = order.buckets.data();
    a.run_keys = order.keys.data();
    launch_write(op, view, a, multiprocessors_, s);
  }

  // Doubles the capacity by rehashing into new storage (caller holds the write lock).
  void grow_once(cudaStream_t s) {
    const TableView& old = storage_.view();
    TableStorage bigger(old.num_buckets * 2, old.bucket_capacity, old.dim,
                        options_.max_hbm_for_values, old.score_bounds != nullptr, stats_, s);
    launch_rehash(old, bigger.view(), s);
    cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (rehash)");
    storage_ = std::move(bigger);
    capacity_.store(storage_.capacity());
    rehashes_.fetch_add(1);
  }

  // Raises or logs what a call's state reports: a reserved key (ERROR: InvalidArgument; the
  // table is unchanged), skipped reserved keys (WARNING), refusals (ERROR: InsertRefused, except
  // for a call that hands refused rows back, insert_and_evict, where ERROR warns instead).
  void report(const char* call, const CallState& st, const uint64_t* keys, cudaStream_t s,
              bool refusals_returned = false) const {
    if (st.reserved_position != kNoPosition) {
      uint64_t key = 0;
      cuda::check(
          cudaMemcpyAsync(&key, keys + st.reserved_position, sizeof key, cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync (reserved key)");
      cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      throw InvalidArgument(std::string(call) + ": keys[" + std::to_string(st.reserved_position) +
                            "] = " + hex(key) + ", a reserved key (>= " + hex(kFirstReservedKey) +
                            "); nothing was changed");
    }
    if (st.refused > 0 && options_.safe_check == SafeCheck::kError && !refusals_returned) {
      throw InsertRefused(
          refused_message(call, st) + "; first: keys[" + std::to_string(st.first_refused_position) +
          "] = " + std::to_string(static_cast<K>(st.first_refused_key)) + " with score " +
          std::to_string(st.first_refused_score) + " < the bucket's lowest score " +
          std::to_string(st.first_refused_bucket_min));
    }
    if (options_.safe_check != SafeCheck::kIgnore) warn_for(call, st);
  }

  std::string refused_message(const char* call, const CallState& st) const {
    return std::string(call) + ": " + std::to_string(st.refused) +
           " insert(s) refused at max_capacity (" + std::to_string(options_.max_capacity) + ")";
  }

  // Logs a call's skipped reserved keys (WARNING) and refusals (WARNING; ERROR where the call
  // handed the refused rows back).
  void warn_for(const char* call, const CallState& st) const {
    if (st.reserved > 0 && options_.safe_check == SafeCheck::kWarning) {
      warn(std::string(call) + ": skipped " + std::to_string(st.reserved) +
           " reserved key(s) (>= " + hex(kFirstReservedKey) + ")");
    }
    if (st.refused > 0) warn(refused_message(call, st));
  }

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

}  // namespace
}  // namespace dynemb::cuda_table

namespace dynemb::detail {

template <TableKey K>
std::unique_ptr<Table<K>> make_cuda_table(const TableOptions& options) {
  return std::make_unique<cuda_table::CudaTable<K>>(options);
}

template std::unique_ptr<Table<int64_t>> make_cuda_table<int64_t>(const TableOptions&);
template std::unique_ptr<Table<uint64_t>> make_cuda_table<uint64_t>(const TableOptions&);

}  // namespace dynemb::detail

// CudaTable: construction, growth, the reports of a call's state, and the whole-table operations
// (erase_if, clear, size, reserve, export, for_each, scores, stats).
#include "cuda/cuda_table.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "cuda/kernels.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#include "dynemb/core/cuda/device_info.hpp"
#include "dynemb/core/log.hpp"

namespace dynemb::table::cuda {
namespace {

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

}  // namespace

template <TableKey K>
CudaTable<K>::CudaTable(const TableOptions& options)
    : options_(options), order_(options.thread_safe) {
  core::cuda::DeviceGuard device(options_.device);
  core::cuda::check(cudaMalloc(reinterpret_cast<void**>(&stats_), sizeof(DeviceStats)),
                    "cudaMalloc (stats)");
  core::cuda::check(cudaMemset(stats_, 0, sizeof(DeviceStats)), "cudaMemset (stats)");
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
  multiprocessors_ = core::cuda::multiprocessors(options_.device);
  core::cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (construction)");
}

template <TableKey K>
CudaTable<K>::~CudaTable() {
  cudaDeviceSynchronize();
  storage_ = TableStorage();
  cudaFree(stats_);
}

// --- whole table ----------------------------------------------------------------------------

template <TableKey K>
size_t CudaTable<K>::erase_if(ScorePredicate predicate, StreamHandle stream) {
  const cudaStream_t s = to_stream(stream);
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Write guard(order_, s);
  CallScratch scratch(s);
  launch_erase_if(storage_.view(), static_cast<uint8_t>(predicate.compare), predicate.threshold,
                  scratch.get(), s);
  return scratch.read().count;
}

template <TableKey K>
void CudaTable<K>::clear(StreamHandle stream) {
  const cudaStream_t s = to_stream(stream);
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Write guard(order_, s);
  launch_clear(storage_.view(), s);
  timer_scores_only_ = timer_policy();
}

template <TableKey K>
size_t CudaTable<K>::size(StreamHandle stream) const {
  const cudaStream_t s = to_stream(stream);
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Read guard(order_, s);
  CallScratch scratch(s);
  launch_count_size(storage_.view(), scratch.get(), s);
  return scratch.read().count;
}

template <TableKey K>
double CudaTable<K>::load_factor(StreamHandle stream) const {
  return static_cast<double>(size(stream)) / static_cast<double>(capacity());
}

template <TableKey K>
void CudaTable<K>::reserve(size_t new_capacity, StreamHandle stream) {
  require(new_capacity <= options_.max_capacity, "reserve", "new_capacity",
          std::to_string(new_capacity),
          "must be <= max_capacity (" + std::to_string(options_.max_capacity) + ")");
  const cudaStream_t s = to_stream(stream);
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Write guard(order_, s);
  while (storage_.capacity() < new_capacity) grow_once(s);
}

template <TableKey K>
size_t CudaTable<K>::export_batch(size_t offset, size_t n_slots, K* keys, float* values,
                                  uint64_t* scores, std::optional<uint64_t> min_score,
                                  StreamHandle stream) {
  if (n_slots == 0) return 0;
  require_pointer(keys, "export_batch", "keys");
  require_pointer(values, "export_batch", "values");
  const cudaStream_t s = to_stream(stream);
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Read guard(order_, s);
  const uint64_t slots = detail::export_slot_count(offset, n_slots, storage_.capacity());
  if (slots == 0) return 0;
  CallScratch scratch(s);
  launch_export(storage_.view(), offset, slots, min_score.has_value(), min_score.value_or(0),
                reinterpret_cast<uint64_t*>(keys), values, scores, scratch.get(), s);
  return scratch.read().count;
}

template <TableKey K>
void CudaTable<K>::for_each(const typename Table<K>::RowVisitor& visit) {
  const cudaStream_t s = nullptr;
  core::cuda::DeviceGuard device(options_.device);
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
    core::cuda::check(
        cudaMemcpy(h_keys.data(), d_keys.data(), count * sizeof(K), cudaMemcpyDefault),
        "cudaMemcpy (for_each keys)");
    core::cuda::check(
        cudaMemcpy(h_scores.data(), d_scores.data(), count * sizeof(uint64_t), cudaMemcpyDefault),
        "cudaMemcpy (for_each scores)");
    core::cuda::check(cudaMemcpy(h_values.data(), d_values.data(), count * dim * sizeof(float),
                                 cudaMemcpyDefault),
                      "cudaMemcpy (for_each values)");
    for (uint64_t i = 0; i < count; ++i) {
      visit(h_keys[i], std::span<const float>(h_values.data() + i * dim, dim), h_scores[i]);
    }
  }
}

// --- scores ---------------------------------------------------------------------------------

template <TableKey K>
uint64_t CudaTable<K>::score() const {
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

template <TableKey K>
void CudaTable<K>::set_score(uint64_t score) {
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

template <TableKey K>
uint64_t CudaTable<K>::clock_for_write() {
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

// --- description ----------------------------------------------------------------------------

template <TableKey K>
TableStats CudaTable<K>::stats() const {
  core::cuda::DeviceGuard device(options_.device);
  core::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (stats)");
  if (reports_ != nullptr) reports_->flush();
  DeviceStats d{};
  core::cuda::check(cudaMemcpy(&d, stats_, sizeof d, cudaMemcpyDeviceToHost), "cudaMemcpy (stats)");
  TableStats out;
  out.evictions = d.evictions;
  out.refused = d.refused;
  out.reserved_keys = d.reserved_keys;
  out.erased = d.erased;
  out.rehashes = rehashes_.load();
  return out;
}

// --- shared by reads and writes -------------------------------------------------------------

template <TableKey K>
ReadArgs CudaTable<K>::read_args(size_t n, const K* keys, float* values, bool* founds,
                                 uint64_t* scores, CallState* state, float** row_ptrs) const {
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

template <TableKey K>
long long CudaTable<K>::load_limit() const {
  return static_cast<long long>(
      std::floor(options_.max_load_factor * static_cast<double>(storage_.capacity())));
}

template <TableKey K>
void CudaTable<K>::grow_once(cudaStream_t s) {
  const TableView& old = storage_.view();
  TableStorage bigger(old.num_buckets * 2, old.bucket_capacity, old.dim,
                      options_.max_hbm_for_values, old.score_bounds != nullptr, stats_, s);
  launch_rehash(old, bigger.view(), s);
  core::cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize (rehash)");
  storage_ = std::move(bigger);
  capacity_.store(storage_.capacity());
  rehashes_.fetch_add(1);
}

template <TableKey K>
void CudaTable<K>::report(const char* call, const CallState& st, const uint64_t* keys,
                          cudaStream_t s, bool refusals_returned) const {
  if (st.reserved_position != kNoPosition) {
    uint64_t key = 0;
    core::cuda::check(
        cudaMemcpyAsync(&key, keys + st.reserved_position, sizeof key, cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync (reserved key)");
    core::cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
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

template <TableKey K>
std::string CudaTable<K>::refused_message(const char* call, const CallState& st) const {
  return std::string(call) + ": " + std::to_string(st.refused) +
         " insert(s) refused at max_capacity (" + std::to_string(options_.max_capacity) + ")";
}

template <TableKey K>
void CudaTable<K>::warn_for(const char* call, const CallState& st) const {
  if (st.reserved > 0 && options_.safe_check == SafeCheck::kWarning) {
    warn(std::string(call) + ": skipped " + std::to_string(st.reserved) +
         " reserved key(s) (>= " + hex(kFirstReservedKey) + ")");
  }
  if (st.refused > 0) warn(refused_message(call, st));
}

template class CudaTable<int64_t>;
template class CudaTable<uint64_t>;

}  // namespace dynemb::table::cuda

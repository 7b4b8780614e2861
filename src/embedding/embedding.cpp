#include "dynemb/embedding/embedding.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "admission_counter.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/log.hpp"
#include "dynemb/ops/ops_backend.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "step_parts.hpp"

namespace dynemb {
namespace {

using detail::ensure_buffer;

// Counts kept in backend memory, so a step never waits for them (read by stats()).
enum Counter : size_t { kRowsCreated, kNonfinite, kAdmissionPending, kEvalMisses, kCounters };

}  // namespace

// What one training forward leaves for its backward.
template <TableKey K>
struct Embedding<K>::Step {
  BackendBuffer<K> unique_keys;
  BackendBuffer<uint32_t> inverse, ids_by_row, row_begin;
  BackendBuffer<uint32_t> bag_by_row;  // the bag of each id in ids_by_row's order
  bool has_bag_by_row = false;         // bag_by_row holds this step's
  BackendBuffer<float> rows, row_grads;
  // Rows by address (by_address): the table's row of each unique key, or the fallback row
  // (eval initializer) where the key has none (missing[i]).
  BackendBuffer<float*> row_ptrs;
  detail::FallbackRows fallback;
  detail::NonfiniteReport nonfinite_report;
  BackendBuffer<bool> found, admit, skip, missing;
  // Counter admission: the step's candidates on the host, and the admitted keys' new rows.
  std::vector<K> host_keys;
  std::vector<uint32_t> host_row_begin, host_counts;
  std::unique_ptr<bool[]> host_found, host_admit;
  size_t host_flags = 0;  // entries of host_admit and (GPU) host_found
  BackendBuffer<K> admitted_keys;
  BackendBuffer<uint32_t> admitted_where;
  BackendBuffer<float> admitted_rows;
  BackendBuffer<int64_t> offsets;
  BackendBuffer<float> weights;
  BackendBuffer<uint64_t> zero_scores;
  size_t zeroed_scores = 0;  // leading entries of zero_scores known to be 0
  BackendBuffer<uint64_t> counters;
  // The ops' scratch, pinned read-back words and key-bit prediction, kept between steps.
  std::unique_ptr<detail::StepWorkspace> workspace;
  const OpsBackend* ops = nullptr;  // the backend's ops, chosen once
  size_t num_unique = 0, num_ids = 0, num_bags = 0;
  PoolingMode mode = PoolingMode::kSum;
  bool weighted = false;
  bool by_address = false;  // the step reads and updates the table's rows through row_ptrs
  bool pending_backward = false;

  detail::IdGroups groups() const {
    return {ids_by_row.data(), row_begin.data(), has_bag_by_row ? bag_by_row.data() : nullptr};
  }

  LookupFeature feature(uint32_t dim, uint32_t row_dim) const {
    return detail::step_feature(rows.data(), by_address ? row_ptrs.data() : nullptr, dim, row_dim,
                                num_unique, inverse.data(), num_ids, offsets.data(), num_bags,
                                weighted ? weights.data() : nullptr, mode);
  }
};

template <TableKey K>
Embedding<K>::Embedding(Backend backend, const EmbeddingOptions& options)
    : backend_(backend), options_(options), step_(std::make_unique<Step>()) {
  validate_embedding_options(options);
  const TableOptions t = detail::embedding_table_options(options);
  row_dim_ = t.dim;
  table_ = make_table<K>(backend, t);
  step_->counters = BackendBuffer<uint64_t>(backend, kCounters, options.table.device);
  step_->ops = &ops_backend(backend);
  step_->workspace = std::make_unique<detail::StepWorkspace>(backend, options.table.device);
  backend_zero(backend, step_->counters.data(), kCounters * sizeof(uint64_t));
  backend_synchronize(backend);
  if (options.admit_threshold > 1) {
    const uint64_t capacity =
        options.admission_capacity != 0 ? options.admission_capacity : t.max_capacity;
    admission_ = std::make_unique<detail::AdmissionCounter<K>>(options.admit_threshold, capacity,
                                                               t.bucket_capacity);
  }
}

template <TableKey K>
Embedding<K>::~Embedding() = default;

template <TableKey K>
void Embedding<K>::forward(const EmbeddingBatch<K>& batch, float* out, uint32_t out_stride,
                           bool training, StreamHandle stream) {
  Step& s = *step_;
  const int device = options_.table.device;
  const size_t n = batch.num_ids;
  require(n == 0 || batch.keys != nullptr, "Embedding::forward", "batch.keys", "nullptr",
          "must be non-null when num_ids = " + std::to_string(n));
  require(batch.num_bags == 0 || batch.offsets != nullptr, "Embedding::forward", "batch.offsets",
          "nullptr", "must be non-null when num_bags = " + std::to_string(batch.num_bags));
  s.pending_backward = false;
  ensure_buffer(s.unique_keys, backend_, n, device);
  ensure_buffer(s.inverse, backend_, n, device);
  ensure_buffer(s.ids_by_row, backend_, n, device);
  ensure_buffer(s.row_begin, backend_, n + 1, device);
  // The bags in the grouped order, from the dedup, for a training step's backward on the GPU
  // (the CPU's reduction works them out as it goes).
  s.has_bag_by_row = training && batch.mode != PoolingMode::kNone && s.ops->reads_bag_by_row();
  if (s.has_bag_by_row) ensure_buffer(s.bag_by_row, backend_, n, device);
  ensure_buffer(s.offsets, backend_, batch.num_bags + 1, device);
  copy_within_backend(backend_, s.offsets.data(), batch.offsets,
                      batch.num_bags == 0 ? 0 : (batch.num_bags + 1) * sizeof(int64_t), stream);
  s.weighted = batch.weights != nullptr;
  if (s.weighted) {
    ensure_buffer(s.weights, backend_, n, device);
    copy_within_backend(backend_, s.weights.data(), batch.weights, n * sizeof(float), stream);
  }
  s.num_ids = n;
  s.num_bags = batch.num_bags;
  s.mode = batch.mode;
  s.num_unique = 0;

  // Everything is checked before the table is touched: the offsets in the dedup's one
  // synchronization, then the shapes (the indices are the dedup's own, so they are in range).
  const LookupOutput output{out, out_stride};
  uint64_t counters[kCounters];
  const size_t u = detail::dedup_grouped<K>(
      *s.ops, n, batch.keys, s.unique_keys.data(), s.inverse.data(), s.ids_by_row.data(),
      s.row_begin.data(), s.has_bag_by_row ? s.bag_by_row.data() : nullptr, s.offsets.data(),
      batch.num_bags, "Embedding::forward", {s.counters.data(), kCounters, counters}, *s.workspace,
      stream);
  s.nonfinite_report.update(counters[kNonfinite], options_.gradient_check, "Embedding::backward");
  stage_done("dedup");
  s.num_unique = u;
  // Counter admission keeps the dense path (it copies rows out and back); the rest works on
  // the table's rows in place.
  s.by_address = !(training && admission_ != nullptr);
  if (s.by_address) {
    ensure_buffer(s.row_ptrs, backend_, u, device);
  } else {
    ensure_buffer(s.rows, backend_, u * row_dim_, device);
  }
  const LookupFeature feature = s.feature(options_.dim, row_dim_);
  detail::validate_lookup_shape("Embedding::forward", {&feature, 1}, {&output, 1}, "outputs");

  lookup_rows(training, stream);
  stage_done("lookup");
  detail::pooled_lookup_unchecked(*s.ops, feature, output, stream);
  stage_done("pool");
  stats_.lookups += n;
  stats_.unique_lookups += u;
  s.pending_backward = training;
}

// Fills row_ptrs (by address) or step rows [u x row_dim] (counter admission) for the unique
// keys, and `found` (has a trainable row).
template <TableKey K>
void Embedding<K>::lookup_rows(bool training, StreamHandle stream) {
  Step& s = *step_;
  const int device = options_.table.device;
  const size_t u = s.num_unique;
  ensure_buffer(s.found, backend_, u, device);
  K* keys = s.unique_keys.data();
  bool* found = s.found.data();
  uint64_t* counters = s.counters.data();
  if (s.by_address) {
    float** rows = s.row_ptrs.data();
    if (training) {
      table_->find_or_insert_pointers(u, keys, rows, found, nullptr, stream);
    } else {
      table_->find_pointers(u, keys, rows, found, nullptr, stream);
    }
    // A key without a row (evaluation: not stored; training: refused, reserved, or evicted by a
    // later key of the same call) reads the evaluation initializer and gets no update.
    ensure_buffer(s.missing, backend_, u, device);
    const uint32_t stride =
        s.fallback.prepare(backend_, options_.eval_initializer, options_.dim, u, device, stream);
    detail::resolve_missing_rows(*s.ops, u, rows, s.missing.data(), s.fallback.rows.data(), stride,
                                 training ? found : nullptr,
                                 training ? counters + kRowsCreated : nullptr,
                                 training ? nullptr : counters + kEvalMisses, stream);
    if (stride != 0) {
      s.ops->fill_initial_rows(u, keys, s.missing.data(), true, options_.eval_initializer,
                               s.fallback.rows.data(), options_.dim, options_.dim, stream);
    }
    return;
  }
  // Counter admission: the counter is a host table, so the unique keys, their occurrences and
  // found flags are read on the host (on the GPU: one synchronization and copies of u entries;
  // on the CPU the step's own buffers).
  float* rows = s.rows.data();
  table_->find(u, keys, rows, found, nullptr, stream);
  const bool on_host = s.ops->memory_is_host();
  if (s.host_flags < u) {
    if (!on_host) s.host_found = std::make_unique<bool[]>(u);
    s.host_admit = std::make_unique<bool[]>(u);
    s.host_flags = u;
  }
  const K* host_keys = keys;
  const uint32_t* host_row_begin = s.row_begin.data();
  bool* host_found = found;
  if (!on_host) {
    s.ops->sync(stream);
    s.host_keys.resize(u);
    s.host_row_begin.resize(u + 1);
    copy_from_backend(backend_, s.host_keys.data(), keys, u * sizeof(K));
    copy_from_backend(backend_, s.host_row_begin.data(), s.row_begin.data(),
                      (u + 1) * sizeof(uint32_t));
    copy_from_backend(backend_, s.host_found.get(), found, u * sizeof(bool));
    host_keys = s.host_keys.data();
    host_row_begin = s.host_row_begin.data();
    host_found = s.host_found.get();
  }
  s.host_counts.resize(u);
  for (size_t i = 0; i < u; ++i) s.host_counts[i] = host_row_begin[i + 1] - host_row_begin[i];
  bool* admit = s.host_admit.get();
  admission_->count_and_admit(u, host_keys, s.host_counts.data(), host_found, admit);
  std::vector<K> admitted;
  std::vector<uint32_t> where;
  for (size_t i = 0; i < u; ++i) {
    if (admit[i]) {
      admitted.push_back(host_keys[i]);
      where.push_back(static_cast<uint32_t>(i));
      host_found[i] = true;
    }
  }
  const size_t a = admitted.size();
  ensure_buffer(s.admitted_keys, backend_, a, device);
  ensure_buffer(s.admitted_where, backend_, a, device);
  ensure_buffer(s.admitted_rows, backend_, a * row_dim_, device);
  copy_to_backend(backend_, s.admitted_keys.data(), admitted.data(), a * sizeof(K));
  copy_to_backend(backend_, s.admitted_where.data(), where.data(), a * sizeof(uint32_t));
  if (!on_host) copy_to_backend(backend_, found, host_found, u * sizeof(bool));
  table_->find_or_insert(a, s.admitted_keys.data(), s.admitted_rows.data(), nullptr, nullptr,
                         stream);
  s.ops->scatter_rows(a, s.admitted_where.data(), s.admitted_rows.data(), row_dim_, rows, row_dim_,
                      row_dim_, stream);
  stats_.rows_created += a;
  // Keys without a row read the evaluation initializer.
  detail::count_flags(*s.ops, u, found, false, counters + kAdmissionPending, stream);
  s.ops->fill_initial_rows(u, keys, found, false, options_.eval_initializer, rows, row_dim_,
                           options_.dim, stream);
}

template <TableKey K>
void Embedding<K>::backward(const float* grad, uint32_t grad_stride, StreamHandle stream) {
  Step& s = *step_;
  require(s.pending_backward, "Embedding::backward", "state", "no pending training forward",
          "backward must follow a forward with training = true, once");
  const int device = options_.table.device;
  const size_t u = s.num_unique;
  const LookupFeature feature = s.feature(options_.dim, row_dim_);
  const LookupOutput grads{const_cast<float*>(grad), grad_stride};
  detail::validate_lookup_shape("Embedding::backward", {&feature, 1}, {&grads, 1}, "grad");
  if (s.by_address && options_.gradient_check != SafeCheck::kError) {
    // Each row's gradient reduced and applied in one pass (never stored); rows with NaN / Inf
    // are skipped and counted on the device (reported at the next forward or stats()); keys
    // without a row (missing) get no update.
    detail::reduce_and_optimize_row_ptrs(*s.ops, options_.optimizer, feature, s.groups(), grads,
                                         s.row_ptrs.data(), s.missing.data(),
                                         s.counters.data() + kNonfinite, *s.workspace, stream);
    if (s.ops->memory_is_host())
      s.nonfinite_report.update(s.counters.data()[kNonfinite], options_.gradient_check,
                                "Embedding::backward");
    stage_done("reduce+optimizer");
    s.pending_backward = false;
    return;
  }
  // gradient_check = ERROR (its check needs the gradients before any row changes) and counter
  // admission: the gradients reduced into memory first.
  ensure_buffer(s.row_grads, backend_, u * options_.dim, device);
  ensure_buffer(s.skip, backend_, u, device);
  const LookupOutput row_grads{s.row_grads.data(), options_.dim};
  detail::reduce_gradients_grouped(*s.ops, feature, s.groups(), grads, row_grads, stream);
  stage_done("reduce");

  // Keys without a row (not admitted; by address: missing) get no update.
  const bool* skip = s.missing.data();
  if (!s.by_address) {
    s.ops->fill_flags(u, false, s.skip.data(), stream);
    s.ops->or_flags(u, s.found.data(), false, s.skip.data(), stream);
    skip = s.skip.data();
  }
  if (options_.gradient_check == SafeCheck::kError) {
    // The one synchronization of a backward: the count must be known before any row changes.
    ensure_buffer(s.admit, backend_, u, device);
    const size_t bad = s.ops->flag_nonfinite_rows(u, s.row_grads.data(), options_.dim, options_.dim,
                                                  s.admit.data(), stream);
    if (bad > 0) {
      stats_.nonfinite_gradients += bad;
      s.pending_backward = false;
      throw InvalidArgument("Embedding::backward: grad holds NaN or Inf for " +
                            std::to_string(bad) + " of " + std::to_string(u) +
                            " keys; gradient_check = error, no row was changed");
    }
    if (s.by_address) {
      s.ops->apply_optimizer_row_ptrs(options_.optimizer, u, s.row_ptrs.data(), s.row_grads.data(),
                                      options_.dim, options_.dim, skip, nullptr, stream);
    } else {
      s.ops->apply_optimizer_rows(options_.optimizer, u, s.rows.data(), row_dim_,
                                  s.row_grads.data(), options_.dim, options_.dim, skip, stream);
    }
  } else {
    detail::apply_optimizer_rows_guarded(*s.ops, options_.optimizer, u, s.rows.data(), row_dim_,
                                         s.row_grads.data(), options_.dim, options_.dim, skip,
                                         s.counters.data() + kNonfinite, stream);
  }
  if (options_.gradient_check != SafeCheck::kError && s.ops->memory_is_host()) {
    s.nonfinite_report.update(s.counters.data()[kNonfinite], options_.gradient_check,
                              "Embedding::backward");
  }
  stage_done("optimizer");
  s.pending_backward = false;
  // By address the rows were updated in place: nothing to write back.
  if (s.by_address) return;
  // LFU counts lookups: the write-back must not count as another touch.
  const uint64_t* scores = nullptr;
  if (options_.table.score_policy == ScorePolicy::kLfu) {
    if (s.zero_scores.data() == nullptr || s.zero_scores.size() < u) {
      ensure_buffer(s.zero_scores, backend_, u, device);
      s.zeroed_scores = 0;
    }
    if (s.zeroed_scores < u) {
      backend_zero(backend_, s.zero_scores.data(), s.zero_scores.size() * sizeof(uint64_t), stream);
      s.zeroed_scores = s.zero_scores.size();
    }
    scores = s.zero_scores.data();
  }
  table_->assign(u, s.unique_keys.data(), s.rows.data(), scores, stream);
  stage_done("write_back");
  s.pending_backward = false;
}

template <TableKey K>
size_t Embedding<K>::end_step() {
  const size_t expired = detail::expire_rows(*table_, options_);
  stats_.expired += expired;
  table_->advance_step();
  return expired;
}

template <TableKey K>
EmbeddingStats Embedding<K>::stats() const {
  EmbeddingStats s = stats_;
  uint64_t counters[kCounters];
  // Whatever stream the last step ran on (it may be gone by now): wait for the whole device.
  backend_synchronize(backend_);
  detail::read_words(*step_->ops, step_->counters.data(), kCounters, counters, nullptr);
  s.rows_created += counters[kRowsCreated];
  s.nonfinite_gradients += counters[kNonfinite];
  s.admission_pending += counters[kAdmissionPending];
  s.eval_misses += counters[kEvalMisses];
  s.table = table_->stats();
  return s;
}

template <TableKey K>
RowLayout Embedding<K>::row_layout() const {
  const OptimizerOptions& o = options_.optimizer;
  return RowLayout{options_.dim,
                   row_dim_ - options_.dim,
                   to_string(o.kind),
                   {{"learning_rate", o.learning_rate},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"rho", o.rho},
                    {"initial_accumulator", o.initial_accumulator},
                    {"ftrl_l1", o.ftrl_l1},
                    {"ftrl_l2", o.ftrl_l2},
                    {"ftrl_beta", o.ftrl_beta},
                    {"weight_decay", o.weight_decay},
                    {"clip_norm", o.clip_norm},
                    {"clip_value", o.clip_value}}};
}

template class Embedding<int64_t>;
template class Embedding<uint64_t>;

}  // namespace dynemb

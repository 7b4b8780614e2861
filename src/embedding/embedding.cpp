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
#include "training_step.hpp"

namespace dynemb {
namespace {

using embedding::detail::ensure_buffer;

// Counts kept in backend memory, so a step never waits for them (read by stats()).
enum Counter : size_t { kRowsCreated, kNonfinite, kAdmissionPending, kEvalMisses, kCounters };

}  // namespace

// The shared pipeline (training_step.hpp) with this table's counters and counter admission.
template <TableKey K>
struct Embedding<K>::Step {
  Step(Backend backend, int device) : pipeline(backend, device) {}

  embedding::detail::TrainingStep<K> pipeline;
  embedding::detail::StepTable<K> table;  // the table and its counters, for the pipeline's lookup
  BackendBuffer<uint64_t> counters;
  // Counter admission: the step's candidates on the host, and the admitted keys' new rows.
  std::vector<K> host_keys;
  std::vector<uint32_t> host_row_begin, host_counts;
  std::unique_ptr<bool[]> host_found, host_admit;
  size_t host_flags = 0;  // entries of host_admit and (GPU) host_found
  BackendBuffer<K> admitted_keys;
  BackendBuffer<uint32_t> admitted_where;
  BackendBuffer<float> admitted_rows;
  BackendBuffer<uint64_t> zero_scores;
  size_t zeroed_scores = 0;  // leading entries of zero_scores known to be 0
};

template <TableKey K>
Embedding<K>::Embedding(Backend backend, const EmbeddingOptions& options)
    : Embedding(backend, options, TableFactory<K>{}) {}

template <TableKey K>
Embedding<K>::Embedding(Backend backend, const EmbeddingOptions& options,
                        const TableFactory<K>& make)
    : backend_(backend), options_(embedding::detail::with_value_type(options)) {
  validate_embedding_options(options);
  const TableOptions t = embedding::detail::embedding_table_options(options);
  row_dim_ = t.dim;
  table_ = make ? make(backend, t) : make_table<K>(backend, t);
  require(table_ != nullptr && table_->dim() == t.dim, "Embedding", "make_table(...)->dim()",
          table_ ? std::to_string(table_->dim()) : "no table",
          "must be the row_dim " + std::to_string(t.dim));
  step_ = std::make_unique<Step>(backend, options.table.device);
  step_->pipeline.value_type = options_.value_type;
  step_->counters = BackendBuffer<uint64_t>(backend, kCounters, options.table.device);
  step_->table = {table_.get(), step_->counters.data() + kRowsCreated,
                  step_->counters.data() + kEvalMisses};
  backend_zero(backend, step_->counters.data(), kCounters * sizeof(uint64_t));
  backend_synchronize(backend);
  if (options.admit_threshold > 1) {
    const uint64_t capacity =
        options.admission_capacity != 0 ? options.admission_capacity : t.max_capacity;
    admission_ = std::make_unique<embedding::detail::AdmissionCounter<K>>(
        options.admit_threshold, capacity, t.bucket_capacity);
  }
}

template <TableKey K>
Embedding<K>::~Embedding() = default;

template <TableKey K>
void Embedding<K>::forward(const EmbeddingBatch<K>& batch, float* out, uint32_t out_stride,
                           bool training, StreamHandle stream) {
  Step& s = *step_;
  embedding::detail::TrainingStep<K>& p = s.pipeline;
  const size_t n = batch.num_ids;
  require(n == 0 || batch.keys != nullptr, "Embedding::forward", "batch.keys", "nullptr",
          "must be non-null when num_ids = " + std::to_string(n));
  require(batch.num_bags == 0 || batch.offsets != nullptr, "Embedding::forward", "batch.offsets",
          "nullptr", "must be non-null when num_bags = " + std::to_string(batch.num_bags));
  p.begin(n, batch.num_bags, batch.mode, batch.weights != nullptr, training);
  copy_within_backend(backend_, p.offsets.data(), batch.offsets,
                      batch.num_bags == 0 ? 0 : (batch.num_bags + 1) * sizeof(int64_t), stream);
  if (p.weighted) {
    copy_within_backend(backend_, p.weights.data(), batch.weights, n * sizeof(float), stream);
  }

  // Everything is checked before the table is touched: the offsets in the dedup's one
  // synchronization, then the shapes (the indices are the dedup's own, so they are in range).
  const LookupOutput output{out, out_stride, options_.output_type};
  uint64_t counters[kCounters];
  const size_t u = ops::detail::dedup_grouped<K>(
      p.ops, n, batch.keys, p.unique_keys.data(), p.inverse.data(), p.grouped_ids(),
      p.row_begin.data(), p.has_bag_by_row ? p.bag_by_row.data() : nullptr, p.offsets.data(),
      batch.num_bags, "Embedding::forward", {s.counters.data(), kCounters, counters}, *p.workspace,
      stream);
  p.report_nonfinite(counters[kNonfinite], options_.gradient_check, "Embedding::backward");
  stage_done("dedup");
  // Counter admission keeps the dense path (it copies rows out and back); the rest works on
  // the table's rows in place.
  const bool by_address = !(training && admission_ != nullptr);
  LookupFeature feature = p.prepare_rows(u, by_address, options_.dim, row_dim_, output,
                                         "Embedding::forward", "outputs");
  if (by_address) {
    const uint64_t bounds[2] = {0, u};
    p.lookup_by_address({&s.table, 1}, bounds, options_, training, stream);
  } else {
    admit_rows(stream);
  }
  stage_done("lookup");
  // One table's bags, beside other tables' work when tables train side by side: the pooling that
  // walks its bags with the next bags' loads issued ahead (docs/ops.md).
  feature.pool_ahead = true;
  p.pool(feature, output, training, stream);
  stage_done("pool");
  stats_.lookups += n;
  stats_.unique_lookups += u;
}

// Counter admission: fills the step's dense rows [u x row_dim] for the unique keys (admitted keys
// get a row; the others read the evaluation initializer) and `found` (has a trainable row).
template <TableKey K>
void Embedding<K>::admit_rows(StreamHandle stream) {
  Step& s = *step_;
  embedding::detail::TrainingStep<K>& p = s.pipeline;
  const int device = options_.table.device;
  const size_t u = p.num_unique;
  ensure_buffer(p.found, backend_, u, device);
  K* keys = p.unique_keys.data();
  bool* found = p.found.data();
  uint64_t* counters = s.counters.data();
  // The counter is a host table, so the unique keys, their occurrences and found flags are read
  // on the host (on the GPU: one synchronization and copies of u entries; on the CPU the step's
  // own buffers).
  float* rows = p.rows.data();
  table_->find(u, keys, rows, found, nullptr, stream);
  const bool on_host = p.ops.memory_is_host();
  if (s.host_flags < u) {
    if (!on_host) s.host_found = std::make_unique<bool[]>(u);
    s.host_admit = std::make_unique<bool[]>(u);
    s.host_flags = u;
  }
  const K* host_keys = keys;
  const uint32_t* host_row_begin = p.row_begin.data();
  bool* host_found = found;
  if (!on_host) {
    p.ops.sync(stream);
    s.host_keys.resize(u);
    s.host_row_begin.resize(u + 1);
    copy_from_backend(backend_, s.host_keys.data(), keys, u * sizeof(K));
    copy_from_backend(backend_, s.host_row_begin.data(), p.row_begin.data(),
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
  p.ops.scatter_rows(a, s.admitted_where.data(), s.admitted_rows.data(), row_dim_, rows, row_dim_,
                     row_dim_, stream);
  stats_.rows_created += a;
  // Keys without a row read the evaluation initializer.
  ops::detail::count_flags(p.ops, u, found, false, counters + kAdmissionPending, stream);
  p.ops.fill_initial_rows(u, keys, found, false, options_.eval_initializer, rows, row_dim_,
                          value_words(options_.value_type, options_.dim), stream);
}

template <TableKey K>
void Embedding<K>::backward(const float* grad, uint32_t grad_stride, StreamHandle stream) {
  Step& s = *step_;
  embedding::detail::TrainingStep<K>& p = s.pipeline;
  const embedding::detail::BackwardSettings settings{
      "Embedding::backward",           options_.optimizer,         options_.gradient_check,
      s.counters.data() + kNonfinite,  stats_.nonfinite_gradients, observer_,
      options_.deterministic_backward, options_.output_type};
  // By address the rows were updated in place; counter admission's dense rows are written back.
  if (!p.backward(grad, grad_stride, options_.dim, row_dim_, settings, stream)) return;
  const size_t u = p.num_unique;
  // LFU counts lookups: the write-back must not count as another touch.
  const uint64_t* scores = nullptr;
  if (options_.table.score_policy == ScorePolicy::kLfu) {
    if (s.zero_scores.data() == nullptr || s.zero_scores.size() < u) {
      ensure_buffer(s.zero_scores, backend_, u, options_.table.device);
      s.zeroed_scores = 0;
    }
    if (s.zeroed_scores < u) {
      backend_zero(backend_, s.zero_scores.data(), s.zero_scores.size() * sizeof(uint64_t), stream);
      s.zeroed_scores = s.zero_scores.size();
    }
    scores = s.zero_scores.data();
  }
  table_->assign(u, p.unique_keys.data(), p.rows.data(), scores, stream);
  stage_done("write_back");
}

template <TableKey K>
size_t Embedding<K>::end_step() {
  const size_t expired = embedding::detail::expire_rows(*table_, options_);
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
  ops::detail::read_words(step_->pipeline.ops, step_->counters.data(), kCounters, counters,
                          nullptr);
  s.rows_created += counters[kRowsCreated];
  s.nonfinite_gradients += counters[kNonfinite];
  s.admission_pending += counters[kAdmissionPending];
  s.eval_misses += counters[kEvalMisses];
  s.table = table_->stats();
  return s;
}

RowLayout embedding_row_layout(const EmbeddingOptions& options) {
  const OptimizerOptions& o = options.optimizer;
  const uint32_t row_dim = embedding_row_dim(options);
  // A 16-bit state is named apart ("adam[state:bfloat16]"), so a checkpoint's state loads only
  // into an embedding that stores it the same way.
  const std::string optimizer =
      options.state_in_value_type
          ? to_string(o.kind) + "[state:" + to_string(options.value_type) + "]"
          : to_string(o.kind);
  return RowLayout{options.dim,
                   row_dim - value_words(options.value_type, options.dim),
                   optimizer,
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
                    {"clip_value", o.clip_value}},
                   options.value_type};
}

template <TableKey K>
RowLayout Embedding<K>::row_layout() const {
  return embedding_row_layout(options_);
}

template class Embedding<int64_t>;
template class Embedding<uint64_t>;

}  // namespace dynemb

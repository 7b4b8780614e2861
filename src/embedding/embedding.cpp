#include "dynemb/embedding/embedding.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/core/log.hpp"
#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "embedding/admission_counter.hpp"

namespace dynemb {
namespace {

// Grows `buffer` to at least `count` elements (contents are not kept); never leaves it
// unallocated, so an empty batch still passes valid pointers on.
template <class T>
void ensure(BackendBuffer<T>& buffer, Backend backend, size_t count, int device) {
  if (buffer.data() == nullptr || buffer.size() < count) {
    buffer = BackendBuffer<T>(backend, count + count / 4 + 16, device);
  }
}

TableOptions table_options_for(const EmbeddingOptions& o) {
  TableOptions t = o.table;
  t.dim = o.dim + optimizer_state_dim(o.optimizer.kind, o.dim);
  t.initializer.width = o.dim;  // optimizer state starts at 0
  return t;
}

}  // namespace

// What one training forward leaves for its backward.
template <TableKey K>
struct Embedding<K>::Step {
  BackendBuffer<K> unique_keys;
  BackendBuffer<uint32_t> inverse, counts, scratch;
  BackendBuffer<float> rows, row_grads;
  BackendBuffer<bool> found, admit, skip;
  BackendBuffer<int64_t> offsets;
  BackendBuffer<float> weights;
  BackendBuffer<uint64_t> zero_scores;
  size_t num_unique = 0, num_ids = 0, num_bags = 0;
  PoolingMode mode = PoolingMode::kSum;
  bool weighted = false;
  bool pending_backward = false;

  LookupFeature feature(uint32_t dim, uint32_t row_dim) const {
    LookupFeature f;
    f.rows = rows.data();
    f.row_stride = row_dim;
    f.dim = dim;
    f.num_rows = num_unique;
    f.indices = inverse.data();
    f.num_ids = num_ids;
    f.offsets = offsets.data();
    f.num_bags = num_bags;
    f.weights = weighted ? weights.data() : nullptr;
    f.mode = mode;
    return f;
  }
};

template <TableKey K>
Embedding<K>::Embedding(Backend backend, const EmbeddingOptions& options)
    : backend_(backend), options_(options), step_(std::make_unique<Step>()) {
  validate_embedding_options(options);
  const TableOptions t = table_options_for(options);
  row_dim_ = t.dim;
  table_ = make_table<K>(backend, t);
  if (options.admit_threshold > 1) {
    require(backend == Backend::kCpu, "Embedding", "admit_threshold",
            std::to_string(options.admit_threshold),
            "counter admission runs on the cpu backend only for now (backend = cuda)");
    const uint64_t capacity =
        options.admission_capacity != 0 ? options.admission_capacity : t.max_capacity;
    admission_ = std::make_unique<detail::AdmissionCounter<K>>(backend, options.admit_threshold,
                                                               capacity, t.bucket_capacity);
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
  ensure(s.unique_keys, backend_, n, device);
  ensure(s.inverse, backend_, n, device);
  ensure(s.counts, backend_, n, device);
  const size_t u = dedup<K>(backend_, n, batch.keys, s.unique_keys.data(), s.inverse.data(),
                            s.counts.data(), stream);
  stage_done("dedup");
  ensure(s.rows, backend_, u * row_dim_, device);
  ensure(s.offsets, backend_, batch.num_bags + 1, device);
  copy_within_backend(backend_, s.offsets.data(), batch.offsets,
                      batch.num_bags == 0 ? 0 : (batch.num_bags + 1) * sizeof(int64_t), stream);
  s.weighted = batch.weights != nullptr;
  if (s.weighted) {
    ensure(s.weights, backend_, n, device);
    copy_within_backend(backend_, s.weights.data(), batch.weights, n * sizeof(float), stream);
  }
  s.num_unique = u;
  s.num_ids = n;
  s.num_bags = batch.num_bags;
  s.mode = batch.mode;
  s.pending_backward = false;

  // Everything is checked before the table is touched.
  const LookupFeature feature = s.feature(options_.dim, row_dim_);
  const LookupOutput output{out, out_stride};
  validate_lookup(backend_, {&feature, 1}, {&output, 1}, "Embedding::forward");

  lookup_rows(training, stream);
  stage_done("lookup");
  pooled_lookup(backend_, {&feature, 1}, {&output, 1}, stream);
  stage_done("pool");
  stats_.lookups += n;
  stats_.unique_lookups += u;
  s.pending_backward = training;
}

// Fills step rows [u x row_dim] for the unique keys and `found` (has a trainable row).
template <TableKey K>
void Embedding<K>::lookup_rows(bool training, StreamHandle stream) {
  Step& s = *step_;
  const int device = options_.table.device;
  const size_t u = s.num_unique;
  ensure(s.found, backend_, u, device);
  ensure(s.admit, backend_, u, device);
  K* keys = s.unique_keys.data();
  float* rows = s.rows.data();
  bool* found = s.found.data();
  if (training && admission_ == nullptr) {
    table_->find_or_insert(u, keys, rows, found, nullptr, stream);
    ensure(s.scratch, backend_, u, device);
    stats_.rows_created += select_indices(backend_, u, found, false, s.scratch.data(), stream);
    // Every key now has a row (refusals were counted by the table; their rows are not kept).
    fill_flags(backend_, u, true, found, stream);
    return;
  }
  table_->find(u, keys, rows, found, nullptr, stream);
  if (training) {
    bool* admit = s.admit.data();
    admission_->count_and_admit(u, keys, s.counts.data(), found, admit);
    std::vector<K> admitted;
    std::vector<uint32_t> where;
    for (size_t i = 0; i < u; ++i) {
      if (admit[i]) {
        admitted.push_back(keys[i]);
        where.push_back(static_cast<uint32_t>(i));
      }
    }
    std::vector<float> new_rows(admitted.size() * row_dim_);
    table_->find_or_insert(admitted.size(), admitted.data(), new_rows.data(), nullptr, nullptr,
                           stream);
    scatter_rows(backend_, where.size(), where.data(), new_rows.data(), row_dim_, rows, row_dim_,
                 row_dim_, stream);
    for (uint32_t i : where) found[i] = true;
    stats_.rows_created += admitted.size();
  }
  // Keys without a row read the evaluation initializer.
  ensure(s.scratch, backend_, u, device);
  const size_t m = select_indices(backend_, u, found, false, s.scratch.data(), stream);
  (training ? stats_.admission_pending : stats_.eval_misses) += m;
  fill_initial_rows<K>(backend_, u, keys, found, false, options_.eval_initializer, rows, row_dim_,
                       options_.dim, stream);
}

template <TableKey K>
void Embedding<K>::backward(const float* grad, uint32_t grad_stride, StreamHandle stream) {
  Step& s = *step_;
  require(s.pending_backward, "Embedding::backward", "state", "no pending training forward",
          "backward must follow a forward with training = true, once");
  const int device = options_.table.device;
  const size_t u = s.num_unique;
  ensure(s.row_grads, backend_, u * options_.dim, device);
  ensure(s.skip, backend_, u, device);
  const LookupFeature feature = s.feature(options_.dim, row_dim_);
  const LookupOutput grads{const_cast<float*>(grad), grad_stride};
  const LookupOutput row_grads{s.row_grads.data(), options_.dim};
  reduce_gradients(backend_, {&feature, 1}, {&grads, 1}, {&row_grads, 1}, stream);
  stage_done("reduce");

  bool* skip = s.skip.data();
  const size_t bad = flag_nonfinite_rows(backend_, u, s.row_grads.data(), options_.dim,
                                         options_.dim, skip, stream);
  if (bad > 0) {
    stats_.nonfinite_gradients += bad;
    const std::string what = "Embedding::backward: grad holds NaN or Inf for " +
                             std::to_string(bad) + " of " + std::to_string(u) + " keys";
    if (options_.gradient_check == SafeCheck::kError) {
      s.pending_backward = false;
      throw InvalidArgument(what + "; gradient_check = error, no row was changed");
    }
    if (options_.gradient_check == SafeCheck::kWarning) warn(what + "; those rows were skipped");
  }
  // Keys without a row (not admitted) get no update.
  or_flags(backend_, u, s.found.data(), false, skip, stream);
  apply_optimizer_rows(backend_, options_.optimizer, u, s.rows.data(), row_dim_, s.row_grads.data(),
                       options_.dim, options_.dim, skip, stream);
  stage_done("optimizer");
  // LFU counts lookups: the write-back must not count as another touch.
  const uint64_t* scores = nullptr;
  if (options_.table.score_policy == ScorePolicy::kLfu) {
    ensure(s.zero_scores, backend_, u, device);
    backend_zero(backend_, s.zero_scores.data(), u * sizeof(uint64_t), stream);
    scores = s.zero_scores.data();
  }
  table_->assign(u, s.unique_keys.data(), s.rows.data(), scores, stream);
  stage_done("write_back");
  s.pending_backward = false;
}

template <TableKey K>
size_t Embedding<K>::end_step() {
  size_t expired = 0;
  if (options_.ttl_steps > 0) {
    const uint64_t step = table_->score();
    if (step >= options_.ttl_steps) {
      expired = table_->erase_if({ScoreCompare::kLessEqual, step - options_.ttl_steps});
    }
  } else if (options_.ttl_seconds > 0.0) {
    const uint64_t now =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    const auto ttl_ns = static_cast<uint64_t>(options_.ttl_seconds * 1e9);
    if (now > ttl_ns) expired = table_->erase_if({ScoreCompare::kLess, now - ttl_ns});
  }
  stats_.expired += expired;
  table_->advance_step();
  return expired;
}

template <TableKey K>
EmbeddingStats Embedding<K>::stats() const {
  EmbeddingStats s = stats_;
  s.table = table_->stats();
  return s;
}

template class Embedding<int64_t>;
template class Embedding<uint64_t>;

}  // namespace dynemb

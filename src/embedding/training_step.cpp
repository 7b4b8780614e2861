#include "training_step.hpp"

#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb::embedding::detail {

template <TableKey K>
TrainingStep<K>::TrainingStep(Backend backend_, int device_)
    : ops(ops_backend(backend_)),
      backend(backend_),
      device(device_),
      workspace(std::make_unique<ops::detail::StepWorkspace>(backend_, device_)) {}

template <TableKey K>
void TrainingStep<K>::begin(size_t n, size_t bags, PoolingMode batch_mode, bool batch_weighted,
                            bool training) {
  pending_backward = false;
  ensure_buffer(unique_keys, backend, n, device);
  ensure_buffer(inverse, backend, n, device);
  ensure_buffer(row_begin, backend, n + 1, device);
  // The bags in the grouped order, from the dedup, for a training step's backward where the
  // backend's reduction reads them (the CPU's works them out as it goes).
  has_bag_by_row = training && batch_mode != PoolingMode::kNone && ops.reads_bag_by_row();
  if (has_bag_by_row) ensure_buffer(bag_by_row, backend, n, device);
  // A pooled backward without weights reads each id's bag, never the id: the grouped ids are not
  // written (docs/ops.md, "The sort carries the bags").
  has_ids_by_row = !has_bag_by_row || batch_weighted;
  if (has_ids_by_row) ensure_buffer(ids_by_row, backend, n, device);
  ensure_buffer(offsets, backend, bags + 1, device);
  weighted = batch_weighted;
  if (weighted) ensure_buffer(weights, backend, n, device);
  num_ids = n;
  num_bags = bags;
  mode = batch_mode;
  num_unique = 0;
  live_rows = nullptr;
}

template <TableKey K>
LookupFeature TrainingStep<K>::prepare_rows(size_t u, bool rows_by_address, uint32_t dim,
                                            uint32_t row_dim, const LookupOutput& out,
                                            const char* where, const char* outputs_name) {
  num_unique = u;
  by_address = rows_by_address;
  if (by_address) {
    ensure_buffer(row_ptrs, backend, u, device);
  } else {
    ensure_buffer(rows, backend, u * row_dim, device);
  }
  const LookupFeature f = feature(dim, row_dim);
  ops::detail::validate_lookup_shape(where, {&f, 1}, {&out, 1}, outputs_name);
  return f;
}

template <TableKey K>
void TrainingStep<K>::lookup_by_address(std::span<const StepTable<K>> tables,
                                        const uint64_t* bounds, const EmbeddingOptions& o,
                                        bool training, StreamHandle stream) {
  const size_t u = num_unique;
  ensure_buffer(found, backend, u, device);
  ensure_buffer(missing, backend, u, device);
  const uint32_t words = value_words(o.value_type, o.dim);
  const uint32_t stride = fallback.prepare(backend, o.eval_initializer, words, u, device, stream);
  for (size_t t = 0; t < tables.size(); ++t) {
    const size_t first = bounds[t];
    const size_t count = bounds[t + 1] - first;
    if (count == 0) continue;
    const K* keys = unique_keys.data() + first;
    float** addresses = row_ptrs.data() + first;
    bool* founds = found.data() + first;
    if (training) {
      tables[t].table->find_or_insert_pointers(count, keys, addresses, founds, nullptr, stream);
    } else {
      tables[t].table->find_pointers(count, keys, addresses, founds, nullptr, stream);
    }
    // A key without a row (evaluation: not stored; training: refused, reserved, or evicted by a
    // later key of the same call) reads the evaluation initializer and gets no update.
    ops::detail::resolve_missing_rows(
        ops, count, addresses, missing.data() + first, fallback.rows.data() + first * stride,
        stride, training ? founds : nullptr, training ? tables[t].rows_created : nullptr,
        training ? nullptr : tables[t].eval_misses, stream);
  }
  if (stride != 0) {
    ops.fill_initial_rows(u, unique_keys.data(), missing.data(), true, o.eval_initializer,
                          fallback.rows.data(), words, words, stream);
  }
}

template <TableKey K>
void TrainingStep<K>::pool(const LookupFeature& f, const LookupOutput& out, bool training,
                           StreamHandle stream) {
  ops::detail::pooled_lookup_unchecked(ops, f, out, stream);
  pending_backward = training;
}

template <TableKey K>
bool TrainingStep<K>::backward(const float* grad, uint32_t grad_stride, uint32_t dim,
                               uint32_t row_dim, const BackwardSettings& b, StreamHandle stream) {
  const auto stage_done = [&](const char* stage) {
    if (b.stage_done) b.stage_done(stage);
  };
  require(pending_backward, b.where, "state", "no pending training forward",
          "backward must follow a forward with training = true, once");
  const size_t u = num_unique;
  const LookupFeature f = feature(dim, row_dim);
  const LookupOutput grads{const_cast<float*>(grad), grad_stride, b.grad_type};
  ops::detail::validate_lookup_shape(b.where, {&f, 1}, {&grads, 1}, "grad");
  pending_backward = false;
  if (by_address && b.gradient_check != SafeCheck::kError) {
    // Each row's gradient reduced and applied in one pass (never stored); rows with NaN / Inf
    // are skipped and counted on the device (reported at the next forward, or here when the
    // counter is host memory); keys without a row (missing) get no update.
    if (b.deterministic) {
      ops::detail::reduce_and_optimize_row_ptrs(ops, b.optimizer, f, groups(), grads,
                                                row_ptrs.data(), missing.data(), b.nonfinite,
                                                *workspace, stream);
    } else {
      ops::detail::reduce_and_optimize_row_ptrs_unordered(ops, b.optimizer, f, groups(), grads,
                                                          row_ptrs.data(), missing.data(),
                                                          b.nonfinite, *workspace, stream);
    }
    if (ops.memory_is_host()) nonfinite_report.update(*b.nonfinite, b.gradient_check, b.where);
    stage_done("reduce+optimizer");
    return false;
  }
  // gradient_check = ERROR (its check needs the gradients before any row changes) and counter
  // admission: the gradients reduced into memory first.
  ensure_buffer(row_grads, backend, u * dim, device);
  ops::detail::reduce_gradients_grouped(ops, f, groups(), grads, {row_grads.data(), dim}, stream);
  stage_done("reduce");

  // Keys without a row (by address: missing; dense: not admitted) get no update.
  const bool* no_update = missing.data();
  if (!by_address) {
    ensure_buffer(skip, backend, u, device);
    ops.fill_flags(u, false, skip.data(), stream);
    ops.or_flags(u, found.data(), false, skip.data(), stream);
    no_update = skip.data();
  }
  if (b.gradient_check == SafeCheck::kError) {
    // The one synchronization of a backward: the count must be known before any row changes.
    ensure_buffer(nonfinite_flags, backend, u, device);
    const size_t bad =
        ops.flag_nonfinite_rows(u, row_grads.data(), dim, dim, nonfinite_flags.data(), stream);
    if (bad > 0) {
      b.refused += bad;
      throw InvalidArgument(std::string(b.where) + ": grad holds NaN or Inf for " +
                            std::to_string(bad) + " of " + std::to_string(u) +
                            " keys; gradient_check = error, no row was changed");
    }
    if (by_address) {
      ops.apply_optimizer_row_ptrs(b.optimizer, u, row_ptrs.data(), row_grads.data(), dim, dim,
                                   no_update, nullptr, stream);
    } else {
      ops.apply_optimizer_rows(b.optimizer, u, rows.data(), row_dim, row_grads.data(), dim, dim,
                               no_update, stream);
    }
  } else {
    ops::detail::apply_optimizer_rows_guarded(ops, b.optimizer, u, rows.data(), row_dim,
                                              row_grads.data(), dim, dim, no_update, b.nonfinite,
                                              stream);
    if (ops.memory_is_host()) nonfinite_report.update(*b.nonfinite, b.gradient_check, b.where);
  }
  stage_done("optimizer");
  return !by_address;
}

template class TrainingStep<int64_t>;
template class TrainingStep<uint64_t>;

}  // namespace dynemb::embedding::detail

// The training step's entries (include/dynemb/ops/step_ops.hpp) on the ops backend given.
#include "dynemb/ops/step_ops.hpp"

#include "dynemb/core/error.hpp"

namespace dynemb::ops::detail {

LookupFeature offsets_feature(size_t n, const uint32_t* inverse, size_t u, const int64_t* offsets,
                              size_t num_bags) {
  LookupFeature f;
  f.num_ids = n;
  f.indices = inverse;
  f.num_rows = u;
  f.offsets = offsets;
  f.num_bags = num_bags;
  return f;
}

void sync_stream(const OpsBackend& ops, StreamHandle stream) {
  ops.sync(stream);
}

template <TableKey K>
size_t dedup_grouped(const OpsBackend& ops, size_t n, const K* keys, K* unique_keys,
                     uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                     uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                     const char* where, ReadAlong along, StepWorkspace& workspace,
                     StreamHandle stream) {
  require(n <= 0xFFFFFFFFull, where, "num_ids", std::to_string(n), "must be < 2^32");
  require(num_bags == 0 || offsets != nullptr, where, "offsets", "nullptr",
          "must be non-null when num_bags = " + std::to_string(num_bags));
  require(n == 0 || num_bags > 0, where, "num_ids", std::to_string(n),
          "must be 0 when num_bags = 0");
  return ops.dedup_grouped(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row,
                           offsets, num_bags, where, along, workspace, stream);
}

void dedup_grouped_async(const OpsBackend& ops, size_t n, const uint64_t* keys,
                         uint64_t* unique_keys, uint32_t* inverse, uint32_t* ids_by_row,
                         uint32_t* row_begin, uint32_t* bag_by_row, const int64_t* offsets,
                         size_t num_bags, int end_bit, uint64_t* unique_count,
                         StepWorkspace& workspace, StreamHandle stream) {
  require(n <= 0xFFFFFFFFull, "dedup_grouped_async", "num_ids", std::to_string(n),
          "must be < 2^32");
  require(end_bit >= 1 && end_bit <= 64, "dedup_grouped_async", "end_bit", std::to_string(end_bit),
          "must be in [1, 64]");
  require(keys != nullptr || end_bit <= 32, "dedup_grouped_async", "end_bit",
          std::to_string(end_bit), "must be <= 32 with keys = nullptr (narrow keys)");
  ops.dedup_grouped_async(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row, offsets,
                          num_bags, end_bit, unique_count, workspace, stream);
}

void pooled_lookup_unchecked(const OpsBackend& ops, const LookupFeature& feature,
                             const LookupOutput& output, StreamHandle stream) {
  ops.pooled_lookup({&feature, 1}, {&output, 1}, stream);
}

namespace {

// The step's gradients are float32 or of the rows' own type (LookupOutput::type): what the
// kernels are compiled for.
void require_gradient_type(const LookupFeature& feature, const LookupOutput& grads,
                           const char* where) {
  require(grads.type == ValueType::kFloat32 || grads.type == feature.value_type, where,
          "grads.type", to_string(grads.type),
          "must be float32 or feature.value_type (" + to_string(feature.value_type) + ")");
}

}  // namespace

void reduce_gradients_grouped(const OpsBackend& ops, const LookupFeature& feature, IdGroups groups,
                              const LookupOutput& grads, const LookupOutput& row_grads,
                              StreamHandle stream) {
  if (feature.num_rows == 0) return;
  require_gradient_type(feature, grads, "reduce_gradients_grouped");
  ops.reduce_gradients_grouped(feature, groups, grads, row_grads, stream);
}

void reduce_and_optimize_row_ptrs(const OpsBackend& ops, const OptimizerOptions& optimizer,
                                  const LookupFeature& feature, IdGroups groups,
                                  const LookupOutput& grads, float* const* rows, const bool* skip,
                                  uint64_t* nonfinite, StepWorkspace& workspace,
                                  StreamHandle stream) {
  if (feature.num_rows == 0) return;
  require(feature.value_type == optimizer.value_type, "reduce_and_optimize_row_ptrs",
          "feature.value_type", to_string(feature.value_type),
          "must equal optimizer.value_type = " + to_string(optimizer.value_type));
  require_gradient_type(feature, grads, "reduce_and_optimize_row_ptrs");
  ops.reduce_and_optimize_row_ptrs(optimizer, feature, groups, grads, rows, skip, nonfinite,
                                   workspace, stream);
}

void reduce_and_optimize_row_ptrs_unordered(const OpsBackend& ops,
                                            const OptimizerOptions& optimizer,
                                            const LookupFeature& feature, IdGroups groups,
                                            const LookupOutput& grads, float* const* rows,
                                            const bool* skip, uint64_t* nonfinite,
                                            StepWorkspace& workspace, StreamHandle stream) {
  if (feature.num_rows == 0) return;
  require_gradient_type(feature, grads, "reduce_and_optimize_row_ptrs_unordered");
  ops.reduce_and_optimize_row_ptrs_unordered(optimizer, feature, groups, grads, rows, skip,
                                             nonfinite, workspace, stream);
}

void count_flags(const OpsBackend& ops, size_t n, const bool* flags, bool value, uint64_t* counter,
                 StreamHandle stream) {
  if (n == 0) return;
  ops.count_flags(n, flags, value, counter, stream);
}

void apply_optimizer_rows_guarded(const OpsBackend& ops, const OptimizerOptions& optimizer,
                                  size_t n, float* rows, uint32_t row_stride, const float* grads,
                                  uint32_t grad_stride, uint32_t dim, const bool* skip,
                                  uint64_t* nonfinite, StreamHandle stream) {
  if (n == 0) return;
  ops.apply_optimizer_rows_guarded(optimizer, n, rows, row_stride, grads, grad_stride, dim, skip,
                                   nonfinite, stream);
}

void apply_optimizer_row_ptrs_guarded(const OpsBackend& ops, const OptimizerOptions& optimizer,
                                      size_t n, float* const* rows, const float* grads,
                                      uint32_t grad_stride, uint32_t dim, const bool* skip,
                                      uint64_t* nonfinite, StreamHandle stream) {
  if (n == 0) return;
  ops.apply_optimizer_row_ptrs(optimizer, n, rows, grads, grad_stride, dim, skip, nonfinite,
                               stream);
}

void resolve_missing_rows(const OpsBackend& ops, size_t n, float** rows, bool* missing,
                          float* fallback, uint32_t fallback_stride, const bool* founds,
                          uint64_t* created, uint64_t* missing_count, StreamHandle stream) {
  if (n == 0) return;
  ops.resolve_missing_rows(n, rows, missing, fallback, fallback_stride, founds, created,
                           missing_count, stream);
}

void read_words(const OpsBackend& ops, const uint64_t* words, size_t count, uint64_t* host,
                StreamHandle stream) {
  if (count == 0) return;
  ops.read_words(words, count, host, stream);
}

template size_t dedup_grouped<int64_t>(const OpsBackend&, size_t, const int64_t*, int64_t*,
                                       uint32_t*, uint32_t*, uint32_t*, uint32_t*, const int64_t*,
                                       size_t, const char*, ReadAlong, StepWorkspace&,
                                       StreamHandle);
template size_t dedup_grouped<uint64_t>(const OpsBackend&, size_t, const uint64_t*, uint64_t*,
                                        uint32_t*, uint32_t*, uint32_t*, uint32_t*, const int64_t*,
                                        size_t, const char*, ReadAlong, StepWorkspace&,
                                        StreamHandle);

}  // namespace dynemb::ops::detail

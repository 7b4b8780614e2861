// The backend-neutral entry points of the training-step ops (include/dynemb/ops/step_ops.hpp).
#include <cstring>

#include "backends.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::detail {

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

void sync_stream(Backend backend, StreamHandle stream) {
  if (backend == Backend::kCuda) sync_stream_cuda(stream);
}

template <TableKey K>
size_t dedup_grouped(Backend backend, size_t n, const K* keys, K* unique_keys, uint32_t* inverse,
                     uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                     const int64_t* offsets, size_t num_bags, const char* where, ReadAlong along,
                     StepWorkspace& workspace, StreamHandle stream) {
  require(n <= 0xFFFFFFFFull, where, "num_ids", std::to_string(n), "must be < 2^32");
  require(num_bags == 0 || offsets != nullptr, where, "offsets", "nullptr",
          "must be non-null when num_bags = " + std::to_string(num_bags));
  require(n == 0 || num_bags > 0, where, "num_ids", std::to_string(n),
          "must be 0 when num_bags = 0");
  if (backend == Backend::kCuda) {
    return dedup_grouped_cuda(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row,
                              offsets, num_bags, where, along, &workspace, stream);
  }
  const size_t u = n == 0 ? 0 : dedup_cpu(n, keys, unique_keys, inverse, nullptr);
  group_ids_cpu(n, inverse, u, ids_by_row, row_begin);
  const LookupFeature f = offsets_feature(n, inverse, u, offsets, num_bags);
  validate_lookup_data_host(where, {&f, 1});
  if (bag_by_row != nullptr) bags_by_row_cpu(n, ids_by_row, offsets, num_bags, bag_by_row);
  if (along.count > 0) std::memcpy(along.host, along.counters, along.count * sizeof(uint64_t));
  return u;
}

void pooled_lookup_unchecked(Backend backend, const LookupFeature& feature,
                             const LookupOutput& output, StreamHandle stream) {
  if (backend == Backend::kCpu) return pooled_lookup_cpu({&feature, 1}, {&output, 1});
  pooled_lookup_cuda({&feature, 1}, {&output, 1}, stream);
}

void reduce_gradients_grouped(Backend backend, const LookupFeature& feature, IdGroups groups,
                              const LookupOutput& grads, const LookupOutput& row_grads,
                              StreamHandle stream) {
  if (feature.num_rows == 0) return;
  if (backend == Backend::kCpu) {
    return reduce_gradients_grouped_cpu(feature, groups, grads, row_grads);
  }
  reduce_gradients_grouped_cuda(feature, groups, grads, row_grads, stream);
}

void reduce_and_optimize_row_ptrs(Backend backend, const OptimizerOptions& optimizer,
                                  const LookupFeature& feature, IdGroups groups,
                                  const LookupOutput& grads, float* const* rows, const bool* skip,
                                  uint64_t* nonfinite, StepWorkspace& workspace,
                                  StreamHandle stream) {
  if (feature.num_rows == 0) return;
  if (backend == Backend::kCpu) {
    return reduce_and_optimize_row_ptrs_cpu(optimizer, feature, groups, grads, rows, skip,
                                            nonfinite);
  }
  reduce_and_optimize_row_ptrs_cuda(optimizer, feature, groups, grads, rows, skip, nonfinite,
                                    workspace, stream);
}

void count_flags(Backend backend, size_t n, const bool* flags, bool value, uint64_t* counter,
                 StreamHandle stream) {
  if (n == 0) return;
  if (backend == Backend::kCuda) return count_flags_cuda(n, flags, value, counter, stream);
  uint64_t c = 0;
  for (size_t i = 0; i < n; ++i) c += flags[i] == value;
  *counter += c;
}

void apply_optimizer_rows_guarded(Backend backend, const OptimizerOptions& optimizer, size_t n,
                                  float* rows, uint32_t row_stride, const float* grads,
                                  uint32_t grad_stride, uint32_t dim, const bool* skip,
                                  uint64_t* nonfinite, StreamHandle stream) {
  if (n == 0) return;
  if (backend == Backend::kCuda) {
    return apply_optimizer_rows_guarded_cuda(optimizer, n, rows, row_stride, grads, grad_stride,
                                             dim, skip, nonfinite, stream);
  }
  apply_optimizer_rows_guarded_cpu(optimizer, n, rows, row_stride, grads, grad_stride, dim, skip,
                                   nonfinite);
}

void apply_optimizer_row_ptrs_guarded(Backend backend, const OptimizerOptions& optimizer, size_t n,
                                      float* const* rows, const float* grads, uint32_t grad_stride,
                                      uint32_t dim, const bool* skip, uint64_t* nonfinite,
                                      StreamHandle stream) {
  if (n == 0) return;
  if (backend == Backend::kCuda) {
    return apply_optimizer_row_ptrs_cuda(optimizer, n, rows, grads, grad_stride, dim, skip,
                                         nonfinite, stream);
  }
  apply_optimizer_row_ptrs_cpu(optimizer, n, rows, grads, grad_stride, dim, skip, nonfinite);
}

void resolve_missing_rows(Backend backend, size_t n, float** rows, bool* missing, float* fallback,
                          uint32_t fallback_stride, const bool* founds, uint64_t* created,
                          uint64_t* missing_count, StreamHandle stream) {
  if (n == 0) return;
  if (backend == Backend::kCuda) {
    return resolve_missing_rows_cuda(n, rows, missing, fallback, fallback_stride, founds, created,
                                     missing_count, stream);
  }
  resolve_missing_rows_cpu(n, rows, missing, fallback, fallback_stride, founds, created,
                           missing_count);
}

void read_words(Backend backend, const uint64_t* words, size_t count, uint64_t* host,
                StreamHandle stream) {
  if (count == 0) return;
  if (backend == Backend::kCuda) return read_words_cuda(words, count, host, stream);
  std::memcpy(host, words, count * sizeof(uint64_t));
}

template size_t dedup_grouped<int64_t>(Backend, size_t, const int64_t*, int64_t*, uint32_t*,
                                       uint32_t*, uint32_t*, uint32_t*, const int64_t*, size_t,
                                       const char*, ReadAlong, StepWorkspace&, StreamHandle);
template size_t dedup_grouped<uint64_t>(Backend, size_t, const uint64_t*, uint64_t*, uint32_t*,
                                        uint32_t*, uint32_t*, uint32_t*, const int64_t*, size_t,
                                        const char*, ReadAlong, StepWorkspace&, StreamHandle);

}  // namespace dynemb::detail

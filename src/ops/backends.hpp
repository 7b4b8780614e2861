// Each backend's implementation of the ops, called only by the dispatchers in src/ops/*.cpp
// (private to the ops part: code above reaches the ops through include/dynemb/ops/).
#pragma once

#include <span>
#include <string>

#include "dynemb/core/error.hpp"
#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/ops/step_ops.hpp"

namespace dynemb::detail {

// --- validation shared by the backends ----------------------------------------------------------

// validate_lookup_shape: include/dynemb/ops/step_ops.hpp.
// Checks offsets and indices in host memory (same errors).
void validate_lookup_data_host(const char* where, std::span<const LookupFeature> features);
// The errors the data checks raise, shared so every backend says the same thing.
[[noreturn]] void throw_bad_first_offset(const char* where, size_t f, int64_t value);
[[noreturn]] void throw_bad_last_offset(const char* where, size_t f, size_t num_bags, int64_t value,
                                        size_t num_ids);
[[noreturn]] void throw_decreasing_offset(const char* where, size_t f, size_t b, int64_t value,
                                          int64_t previous);
[[noreturn]] void throw_bad_index(const char* where, size_t f, size_t i, uint32_t value,
                                  size_t num_rows);

// --- CPU ----------------------------------------------------------------------------------------

template <TableKey K>
size_t dedup_cpu(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts);
void pooled_lookup_cpu(std::span<const LookupFeature> features,
                       std::span<const LookupOutput> outputs);
void reduce_gradients_cpu(std::span<const LookupFeature> features,
                          std::span<const LookupOutput> grads,
                          std::span<const LookupOutput> row_grads);
void gather_rows_cpu(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                     float* dst, uint32_t dst_stride, uint32_t width);
void scatter_rows_cpu(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                      float* dst, uint32_t dst_stride, uint32_t width);
template <TableKey K>
void fill_initial_rows_cpu(size_t n, const K* keys, const bool* flags, bool when,
                           const InitializerOptions& init, float* rows, uint32_t stride,
                           uint32_t width);
size_t select_indices_cpu(size_t n, const bool* flags, bool value, uint32_t* out);
size_t flag_nonfinite_rows_cpu(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                               bool* flags);
void apply_optimizer_rows_cpu(const OptimizerOptions& o, size_t n, float* rows, uint32_t row_stride,
                              const float* grads, uint32_t grad_stride, uint32_t dim,
                              const bool* skip);
// Rows by address (null rows[i] skipped); a non-null `nonfinite` checks each gradient row first
// (apply_optimizer_rows_guarded's rule).
void apply_optimizer_row_ptrs_cpu(const OptimizerOptions& o, size_t n, float* const* rows,
                                  const float* grads, uint32_t grad_stride, uint32_t dim,
                                  const bool* skip, uint64_t* nonfinite);
void resolve_missing_rows_cpu(size_t n, float** rows, bool* missing, float* fallback,
                              uint32_t fallback_stride, const bool* founds, uint64_t* created,
                              uint64_t* missing_count);
// Groups ids [0, num_ids) by indices[i] (< num_rows): ids_by_row (num_ids), row_begin
// (num_rows + 1), each row's ids ascending.
void group_ids_cpu(size_t num_ids, const uint32_t* indices, size_t num_rows, uint32_t* ids_by_row,
                   uint32_t* row_begin);
// bag_by_row[k] = the bag (of offsets[0, num_bags], valid) holding id ids_by_row[k], k < num_ids.
void bags_by_row_cpu(size_t num_ids, const uint32_t* ids_by_row, const int64_t* offsets,
                     size_t num_bags, uint32_t* bag_by_row);
void reduce_gradients_grouped_cpu(const LookupFeature& x, IdGroups groups, const LookupOutput& g,
                                  const LookupOutput& r);
void reduce_and_optimize_row_ptrs_cpu(const OptimizerOptions& o, const LookupFeature& x,
                                      IdGroups groups, const LookupOutput& g, float* const* rows,
                                      const bool* skip, uint64_t* nonfinite);
void apply_optimizer_rows_guarded_cpu(const OptimizerOptions& o, size_t n, float* rows,
                                      uint32_t row_stride, const float* grads, uint32_t grad_stride,
                                      uint32_t dim, const bool* skip, uint64_t* nonfinite);
// include/dynemb/ops/table_keys.hpp on the host.
template <TableKey K>
void combine_table_keys_cpu(uint32_t table, uint32_t shift, size_t n, const K* keys,
                            const int64_t* offsets, size_t num_bags, uint64_t base,
                            uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                            uint64_t* status);
template <TableKey K>
void split_table_keys_cpu(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                          uint32_t shift, K* keys, uint64_t* bounds);

// --- CUDA (src/ops/cuda; without the CUDA backend, src/ops/no_cuda throws NotAvailable) -------

template <TableKey K>
size_t dedup_cuda(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts,
                  StreamHandle stream);
void validate_lookup_data_cuda(const char* where, std::span<const LookupFeature> features,
                               StreamHandle stream);
void pooled_lookup_cuda(std::span<const LookupFeature> features,
                        std::span<const LookupOutput> outputs, StreamHandle stream);
void reduce_gradients_cuda(std::span<const LookupFeature> features,
                           std::span<const LookupOutput> grads,
                           std::span<const LookupOutput> row_grads, StreamHandle stream);
void gather_rows_cuda(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                      float* dst, uint32_t dst_stride, uint32_t width, StreamHandle stream);
void scatter_rows_cuda(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                       float* dst, uint32_t dst_stride, uint32_t width, StreamHandle stream);
template <TableKey K>
void fill_initial_rows_cuda(size_t n, const K* keys, const bool* flags, bool when,
                            const InitializerOptions& init, float* rows, uint32_t stride,
                            uint32_t width, StreamHandle stream);
size_t select_indices_cuda(size_t n, const bool* flags, bool value, uint32_t* out,
                           StreamHandle stream);
void fill_flags_cuda(size_t n, bool value, bool* flags, StreamHandle stream);
void or_flags_cuda(size_t n, const bool* flags, bool when, bool* out, StreamHandle stream);
size_t flag_nonfinite_rows_cuda(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                                bool* flags, StreamHandle stream);
void apply_optimizer_rows_cuda(const OptimizerOptions& o, size_t n, float* rows,
                               uint32_t row_stride, const float* grads, uint32_t grad_stride,
                               uint32_t dim, const bool* skip, StreamHandle stream);
// workspace: nullptr = stream-ordered temporaries (the public dedup, which asks for no
// bag_by_row: the bags need the workspace).
template <TableKey K>
size_t dedup_grouped_cuda(size_t n, const K* keys, K* unique_keys, uint32_t* inverse,
                          uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                          const int64_t* offsets, size_t num_bags, const char* where,
                          ReadAlong along, StepWorkspace* workspace, StreamHandle stream);
void reduce_gradients_grouped_cuda(const LookupFeature& x, IdGroups groups, const LookupOutput& g,
                                   const LookupOutput& r, StreamHandle stream);
void count_flags_cuda(size_t n, const bool* flags, bool value, uint64_t* counter,
                      StreamHandle stream);
void apply_optimizer_rows_guarded_cuda(const OptimizerOptions& o, size_t n, float* rows,
                                       uint32_t row_stride, const float* grads,
                                       uint32_t grad_stride, uint32_t dim, const bool* skip,
                                       uint64_t* nonfinite, StreamHandle stream);
void reduce_and_optimize_row_ptrs_cuda(const OptimizerOptions& o, const LookupFeature& x,
                                       IdGroups groups, const LookupOutput& g, float* const* rows,
                                       const bool* skip, uint64_t* nonfinite,
                                       StepWorkspace& workspace, StreamHandle stream);
void apply_optimizer_row_ptrs_cuda(const OptimizerOptions& o, size_t n, float* const* rows,
                                   const float* grads, uint32_t grad_stride, uint32_t dim,
                                   const bool* skip, uint64_t* nonfinite, StreamHandle stream);
void resolve_missing_rows_cuda(size_t n, float** rows, bool* missing, float* fallback,
                               uint32_t fallback_stride, const bool* founds, uint64_t* created,
                               uint64_t* missing_count, StreamHandle stream);
void read_words_cuda(const uint64_t* words, size_t count, uint64_t* host, StreamHandle stream);
void fill_iota_cuda(uint32_t* out, size_t n, StreamHandle stream);
template <TableKey K>
void combine_table_keys_cuda(uint32_t table, uint32_t shift, size_t n, const K* keys,
                             const int64_t* offsets, size_t num_bags, uint64_t base,
                             uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                             uint64_t* status, StreamHandle stream);
template <TableKey K>
void split_table_keys_cuda(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                           uint32_t shift, K* keys, uint64_t* bounds, StreamHandle stream);
// Page-locked host memory (cudaMallocHost) and its release.
void* pinned_host_alloc_cuda(size_t bytes);
void pinned_host_free_cuda(void* p) noexcept;
// Waits for `stream`'s work.
void sync_stream_cuda(StreamHandle stream);

// Throws NotAvailable naming `where` (a CUDA op in a build without the CUDA backend).
[[noreturn]] inline void no_cuda_ops(const char* where) {
  throw NotAvailable(std::string(where) + ": backend = cuda, but this build has no CUDA backend");
}

}  // namespace dynemb::detail

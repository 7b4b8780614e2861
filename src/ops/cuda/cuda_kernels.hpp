// The CUDA backend's ops (src/ops/cuda/), behind CudaOps (cuda_ops.cpp); built only with the
// CUDA backend.
#pragma once

#include <span>

#include "dynemb/core/error.hpp"
#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "dynemb/ops/table_keys.hpp"
#include "lookup_validation.hpp"

namespace dynemb::ops::detail {

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
// reduce_and_optimize_row_ptrs_unordered on the GPU (atomic_backward.cu).
void reduce_and_optimize_row_ptrs_atomic_cuda(const OptimizerOptions& o, const LookupFeature& x,
                                              const LookupOutput& g, float* const* rows,
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
bool combine_tables_narrow_cuda(std::span<const TableBatch> tables, uint32_t shift, bool bags,
                                int64_t* combined_offsets, uint64_t* status,
                                StepWorkspace& workspace, StreamHandle stream);
void spread_table_keys_cuda(const TableSpread& spread, StreamHandle stream);
void gather_table_rows_cuda(const TableSpread& spread, const TableRows& rows, StreamHandle stream);
void dedup_grouped_async_cuda(size_t n, const uint64_t* keys, uint64_t* unique_keys,
                              uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                              uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                              int end_bit, uint64_t* unique_count, StepWorkspace& workspace,
                              StreamHandle stream);
// Whether `stream` is capturing a CUDA graph.
bool stream_capturing_cuda(StreamHandle stream);
// Side streams and their events on `device` (stream_fan.hpp); high_priority: blocks of their
// kernels are scheduled ahead of those of default-priority streams (in a graph, when it is
// instantiated with cudaGraphInstantiateFlagUseNodePriority).
std::unique_ptr<StreamFan> make_stream_fan_cuda(size_t streams, int device,
                                                bool high_priority = false);
// Page-locked host memory (cudaMallocHost) and its release.
void* pinned_host_alloc_cuda(size_t bytes);
void pinned_host_free_cuda(void* p) noexcept;
// Waits for `stream`'s work.
void sync_stream_cuda(StreamHandle stream);

}  // namespace dynemb::ops::detail

// The CPU backend's ops (src/ops/cpu/), behind CpuOps (cpu_ops.cpp).
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
void spread_table_keys_cpu(const TableSpread& spread);
void gather_table_rows_cpu(const TableSpread& spread, const TableRows& rows);
template <TableKey K>
void split_table_keys_cpu(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                          uint32_t shift, K* keys, uint64_t* bounds);

}  // namespace dynemb::ops::detail

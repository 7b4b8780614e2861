// Entry points for a training step that already knows its inputs are sound (the trainable
// table, src/embedding/): no re-validation, no host synchronization beyond what each names.
// Results are the same as the public ops' (include/dynemb/ops/). Each runs on the ops backend
// it is given (the step holds one, ops_backend.hpp); the same entries taking a Backend, at the
// end, run on ops_backend(backend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dynemb/core/key.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/ops/ops_backend.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/step_types.hpp"
#include "dynemb/ops/step_workspace.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::ops::detail {

// Checks shapes, strides, modes and pointers (reads no buffer); throws InvalidArgument naming
// `where`, the feature, the argument, its value and its limit.
void validate_lookup_shape(const char* where, std::span<const LookupFeature> features,
                           std::span<const LookupOutput> outputs, const char* outputs_name);

// Waits for `stream`'s work (CUDA); nothing to wait for on the CPU backend.
void sync_stream(const OpsBackend& ops, StreamHandle stream);

// The view of a dedup's ids over its u unique rows and the bags' offsets, without rows (what
// validate_lookup_data_host checks; callers add the rows, dims and pooling).
LookupFeature offsets_feature(size_t n, const uint32_t* inverse, size_t u, const int64_t* offsets,
                              size_t num_bags);

// dedup (include/dynemb/ops/dedup.hpp, same unique keys and inverse) that also writes the
// groups of the ids by unique key (ids_by_row: n, row_begin: n + 1 entries) and, when bag_by_row
// is not null, the bag holding each id in that order (n entries: IdGroups::bag_by_row), and checks
// the bags' offsets (offsets[0] == 0, non-decreasing, offsets[num_bags] == n) in the same host
// synchronization; throws InvalidArgument naming `where` (as validate_lookup does) when they
// are bad. ids_by_row may be null where bag_by_row is not: the grouped ids are then not written
// (a reduction that reads only the bags: no weights, pooled; the CUDA sort then carries the bags
// instead of the positions). Reads `along` in that synchronization too (at most
// StepWorkspace::kHostWords - 6 words). Returns the number of unique keys. Its scratch comes from
// `workspace`, which also remembers the key bits the batch needed, so the next batch sorts only
// those (a batch that needs more is sorted again after the synchronization: a second one, only
// then).
template <TableKey K>
size_t dedup_grouped(const OpsBackend& ops, size_t n, const K* keys, K* unique_keys,
                     uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                     uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                     const char* where, ReadAlong along, StepWorkspace& workspace,
                     StreamHandle stream);

// dedup_grouped of 64-bit keys with nothing read on the host: sorts bits [0, end_bit) only (keys
// that differ above end_bit are grouped wrongly: the caller refuses such batches itself), writes
// the unique count u to *unique_count (backend memory), and does not check the offsets (the
// caller's combine_table_keys does). Entries of row_begin after u are left as they are. No
// synchronization, no allocation once the workspace has grown to n; capturable in a CUDA graph.
// keys = nullptr: combine_tables_narrow (table_keys.hpp) has just written the keys' low 32 bits
// (and, with bag_by_row, each id's bag) to the workspace; end_bit must then be <= 32.
void dedup_grouped_async(const OpsBackend& ops, size_t n, const uint64_t* keys,
                         uint64_t* unique_keys, uint32_t* inverse, uint32_t* ids_by_row,
                         uint32_t* row_begin, uint32_t* bag_by_row, const int64_t* offsets,
                         size_t num_bags, int end_bit, uint64_t* unique_count,
                         StepWorkspace& workspace, StreamHandle stream);

// pooled_lookup of one feature without the data checks (the caller vouches for offsets and
// indices).
void pooled_lookup_unchecked(const OpsBackend& ops, const LookupFeature& feature,
                             const LookupOutput& output, StreamHandle stream);

// reduce_gradients of one feature whose ids are grouped by row (feature.indices agree with
// groups), without the data checks: no sort, no host synchronization. Bit-identical to
// reduce_gradients.
void reduce_gradients_grouped(const OpsBackend& ops, const LookupFeature& feature, IdGroups groups,
                              const LookupOutput& grads, const LookupOutput& row_grads,
                              StreamHandle stream);

// reduce_gradients_grouped of `feature` (by address: rows[r] is row r's address, as in
// feature.row_ptrs) followed by the optimizer on each row with its reduced gradient, as
// apply_optimizer_row_ptrs_guarded (nonfinite not null: a row whose gradient holds a NaN / Inf is
// counted, not updated) or apply_optimizer_row_ptrs (nonfinite null) would; skip[r] set or a null
// rows[r]: not updated. Bit-identical to those two calls. On CUDA one warp reduces a row of at most
// kGradientChunk ids into shared memory and updates it there and then; rows of more ids keep the
// two-level chunk sums and are updated by the block that adds their chunks; the per-row gradients
// never go to backend memory (dims over kFusedMaxDim: they do, in the workspace). No
// synchronization; scratch from `workspace`.
void reduce_and_optimize_row_ptrs(const OpsBackend& ops, const OptimizerOptions& optimizer,
                                  const LookupFeature& feature, IdGroups groups,
                                  const LookupOutput& grads, float* const* rows, const bool* skip,
                                  uint64_t* nonfinite, StepWorkspace& workspace,
                                  StreamHandle stream);

// reduce_and_optimize_row_ptrs without its fixed order of additions (the opt-in
// non-deterministic backward, docs/value_types.md): on CUDA each id's weighted bag gradient is
// added with float atomics straight into its row's gradient in the workspace (no grouping of the
// ids, no chunk sums), then the optimizer runs as apply_optimizer_row_ptrs(_guarded). Rows agree
// with reduce_and_optimize_row_ptrs' within float32 rounding of the sums, not bit for bit, and
// may differ run to run. The CPU backend runs reduce_and_optimize_row_ptrs itself. No
// synchronization.
void reduce_and_optimize_row_ptrs_unordered(const OpsBackend& ops,
                                            const OptimizerOptions& optimizer,
                                            const LookupFeature& feature, IdGroups groups,
                                            const LookupOutput& grads, float* const* rows,
                                            const bool* skip, uint64_t* nonfinite,
                                            StepWorkspace& workspace, StreamHandle stream);

// The largest dim reduce_and_optimize_row_ptrs keeps a row's gradient on chip for (CUDA).
inline constexpr uint32_t kFusedMaxDim = 1024;

// Adds how many flags[i] == value (i < n) to *counter (backend memory); no synchronization.
void count_flags(const OpsBackend& ops, size_t n, const bool* flags, bool value, uint64_t* counter,
                 StreamHandle stream);

// apply_optimizer_rows that first checks each row's gradient: a row holding a NaN or Inf is
// left unchanged and counted into *nonfinite (backend memory), whether or not skip[i] is set;
// no synchronization. Rows agree with apply_optimizer_rows'.
void apply_optimizer_rows_guarded(const OpsBackend& ops, const OptimizerOptions& optimizer,
                                  size_t n, float* rows, uint32_t row_stride, const float* grads,
                                  uint32_t grad_stride, uint32_t dim, const bool* skip,
                                  uint64_t* nonfinite, StreamHandle stream);

// apply_optimizer_rows_guarded on rows by address (apply_optimizer_row_ptrs): null rows[i] and
// rows with skip[i] set are not updated; rows with a NaN / Inf gradient are counted into
// *nonfinite and not updated. No synchronization.
void apply_optimizer_row_ptrs_guarded(const OpsBackend& ops, const OptimizerOptions& optimizer,
                                      size_t n, float* const* rows, const float* grads,
                                      uint32_t grad_stride, uint32_t dim, const bool* skip,
                                      uint64_t* nonfinite, StreamHandle stream);

// After a table's *_pointers call: missing[i] = (rows[i] == nullptr), and each missing address
// becomes fallback + i * fallback_stride (stride 0: one shared row), so every address can be
// read. Adds to *missing_count (if not null) how many were missing, and to *created (if not
// null; founds required) how many have a row that did not exist before (founds[i] false).
// Backend memory; no synchronization.
void resolve_missing_rows(const OpsBackend& ops, size_t n, float** rows, bool* missing,
                          float* fallback, uint32_t fallback_stride, const bool* founds,
                          uint64_t* created, uint64_t* missing_count, StreamHandle stream);

// Copies `count` words of backend memory to the host once `stream`'s work is done (synchronizes
// it on CUDA).
void read_words(const OpsBackend& ops, const uint64_t* words, size_t count, uint64_t* host,
                StreamHandle stream);

// --- the entries above on ops_backend(backend) ------------------------------------------------

inline void sync_stream(Backend backend, StreamHandle stream) {
  return sync_stream(ops_backend(backend), stream);
}

template <TableKey K>
inline size_t dedup_grouped(Backend backend, size_t n, const K* keys, K* unique_keys,
                            uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                            uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                            const char* where, ReadAlong along, StepWorkspace& workspace,
                            StreamHandle stream) {
  return dedup_grouped<K>(ops_backend(backend), n, keys, unique_keys, inverse, ids_by_row,
                          row_begin, bag_by_row, offsets, num_bags, where, along, workspace,
                          stream);
}

inline void pooled_lookup_unchecked(Backend backend, const LookupFeature& feature,
                                    const LookupOutput& output, StreamHandle stream) {
  return pooled_lookup_unchecked(ops_backend(backend), feature, output, stream);
}

inline void reduce_gradients_grouped(Backend backend, const LookupFeature& feature, IdGroups groups,
                                     const LookupOutput& grads, const LookupOutput& row_grads,
                                     StreamHandle stream) {
  return reduce_gradients_grouped(ops_backend(backend), feature, groups, grads, row_grads, stream);
}

inline void reduce_and_optimize_row_ptrs(Backend backend, const OptimizerOptions& optimizer,
                                         const LookupFeature& feature, IdGroups groups,
                                         const LookupOutput& grads, float* const* rows,
                                         const bool* skip, uint64_t* nonfinite,
                                         StepWorkspace& workspace, StreamHandle stream) {
  return reduce_and_optimize_row_ptrs(ops_backend(backend), optimizer, feature, groups, grads, rows,
                                      skip, nonfinite, workspace, stream);
}

inline void count_flags(Backend backend, size_t n, const bool* flags, bool value, uint64_t* counter,
                        StreamHandle stream) {
  return count_flags(ops_backend(backend), n, flags, value, counter, stream);
}

inline void apply_optimizer_rows_guarded(Backend backend, const OptimizerOptions& optimizer,
                                         size_t n, float* rows, uint32_t row_stride,
                                         const float* grads, uint32_t grad_stride, uint32_t dim,
                                         const bool* skip, uint64_t* nonfinite,
                                         StreamHandle stream) {
  return apply_optimizer_rows_guarded(ops_backend(backend), optimizer, n, rows, row_stride, grads,
                                      grad_stride, dim, skip, nonfinite, stream);
}

inline void apply_optimizer_row_ptrs_guarded(Backend backend, const OptimizerOptions& optimizer,
                                             size_t n, float* const* rows, const float* grads,
                                             uint32_t grad_stride, uint32_t dim, const bool* skip,
                                             uint64_t* nonfinite, StreamHandle stream) {
  return apply_optimizer_row_ptrs_guarded(ops_backend(backend), optimizer, n, rows, grads,
                                          grad_stride, dim, skip, nonfinite, stream);
}

inline void resolve_missing_rows(Backend backend, size_t n, float** rows, bool* missing,
                                 float* fallback, uint32_t fallback_stride, const bool* founds,
                                 uint64_t* created, uint64_t* missing_count, StreamHandle stream) {
  return resolve_missing_rows(ops_backend(backend), n, rows, missing, fallback, fallback_stride,
                              founds, created, missing_count, stream);
}

inline void read_words(Backend backend, const uint64_t* words, size_t count, uint64_t* host,
                       StreamHandle stream) {
  return read_words(ops_backend(backend), words, count, host, stream);
}

}  // namespace dynemb::ops::detail

// The training pipeline Embedding and EmbeddingCollection share: what a training forward leaves
// for its backward, the lookup of the unique keys' rows by address over each table's range, the
// pooling, and the backward (reduce + optimize, fused or checked first). The two differ only in
// how the batch becomes unique keys (one table's keys, or every table's combined and split) and
// in counter admission (Embedding's dense rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "dynemb/ops/ops_backend.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "step_parts.hpp"

namespace dynemb::embedding::detail {

// A table stepped by the pipeline and where its device counters live.
template <TableKey K>
struct StepTable {
  Table<K>* table = nullptr;
  uint64_t* rows_created = nullptr;  // backend memory: keys that got a row (training)
  uint64_t* eval_misses = nullptr;   // backend memory: evaluation reads of keys without a row
};

// What the pipeline's backward needs to know of its owner.
struct BackwardSettings {
  const char* where;  // names the backward in errors and warnings
  const OptimizerOptions& optimizer;
  SafeCheck gradient_check;
  uint64_t* nonfinite;  // backend memory: gradient rows with NaN / Inf skipped
  uint64_t& refused;    // host: rows of backwards refused under gradient_check = ERROR
  const std::function<void(const char*)>& stage_done;
  // false: the fused pass sums each row's gradient in any order (float atomics on CUDA).
  bool deterministic = true;
  // What the gradients' elements are (EmbeddingOptions::output_type).
  ValueType grad_type = ValueType::kFloat32;
};

template <TableKey K>
class TrainingStep {
 public:
  TrainingStep(Backend backend, int device);

  // Grows the dedup's buffers for a batch of n ids and num_bags bags and records its shape; a
  // training step on a backend whose reduction reads each id's bag has the dedup write them.
  void begin(size_t n, size_t num_bags, PoolingMode mode, bool weighted, bool training);

  // After the dedup (u unique keys): room for their rows (by address, or dense [u x row_dim]),
  // and the step's lookup feature checked against `out` (InvalidArgument naming `where`).
  LookupFeature prepare_rows(size_t u, bool by_address, uint32_t dim, uint32_t row_dim,
                             const LookupOutput& out, const char* where, const char* outputs_name);

  // Each table finds (training: finds or inserts) the addresses of its range
  // [bounds[t], bounds[t + 1]) of the unique keys; keys without a row read `options`'
  // eval_initializer and get no update (missing).
  void lookup_by_address(std::span<const StepTable<K>> tables, const uint64_t* bounds,
                         const EmbeddingOptions& options, bool training, StreamHandle stream);

  // Pools the rows into `out`; a training forward leaves the step for backward().
  void pool(const LookupFeature& feature, const LookupOutput& out, bool training,
            StreamHandle stream);

  // Reduces `grad` to one gradient per unique key and applies the optimizer to the rows the
  // forward found: by address and without gradient_check = ERROR in one fused pass (no
  // synchronization); otherwise reduced into row_grads first (ERROR: checked, one
  // synchronization, InvalidArgument and no row changed when a gradient holds NaN / Inf). Dense
  // rows (counter admission) skip keys without a row (found false). Returns whether the dense
  // rows changed and must be written back.
  bool backward(const float* grad, uint32_t grad_stride, uint32_t dim, uint32_t row_dim,
                const BackwardSettings& settings, StreamHandle stream);

  // Logs (WARNING) the non-finite gradient rows counted up to `total` (read with the dedup).
  void report_nonfinite(uint64_t total, SafeCheck mode, const char* where) {
    nonfinite_report.update(total, mode, where);
  }

  ops::detail::IdGroups groups() const {
    return {grouped_ids(), row_begin.data(), has_bag_by_row ? bag_by_row.data() : nullptr};
  }
  // The dedup's ids_by_row: null when the backward reads only the bags (has_ids_by_row false).
  uint32_t* grouped_ids() { return has_ids_by_row ? ids_by_row.data() : nullptr; }
  const uint32_t* grouped_ids() const { return has_ids_by_row ? ids_by_row.data() : nullptr; }
  LookupFeature feature(uint32_t dim, uint32_t row_dim) const {
    LookupFeature f = step_feature(rows.data(), by_address ? row_ptrs.data() : nullptr, dim,
                                   row_dim, num_unique, inverse.data(), num_ids, offsets.data(),
                                   num_bags, weighted ? weights.data() : nullptr, mode, value_type);
    f.live_rows = live_rows;
    return f;
  }

  const OpsBackend& ops;  // the backend's ops, chosen once
  Backend backend;
  int device;
  BackendBuffer<K> unique_keys;
  BackendBuffer<uint32_t> inverse, ids_by_row, row_begin;
  BackendBuffer<uint32_t> bag_by_row;  // the bag of each id in ids_by_row's order
  bool has_bag_by_row = false;         // bag_by_row holds this step's
  // ids_by_row is written: the backward reads an id (weights, no pooling) or has no bag_by_row.
  bool has_ids_by_row = true;
  BackendBuffer<int64_t> offsets;
  BackendBuffer<float> weights;
  // Rows by address (by_address): the table's row of each unique key, or the fallback row
  // (eval initializer) where the key has none (missing[i]). Dense: rows [u x row_dim].
  BackendBuffer<float*> row_ptrs;
  BackendBuffer<float> rows, row_grads;
  FallbackRows fallback;
  BackendBuffer<bool> found, missing, skip, nonfinite_flags;
  // The ops' scratch, pinned read-back words and key-bit prediction, kept between steps.
  std::unique_ptr<ops::detail::StepWorkspace> workspace;
  size_t num_unique = 0, num_ids = 0, num_bags = 0;
  PoolingMode mode = PoolingMode::kSum;
  bool weighted = false;
  bool by_address = true;  // the step reads and updates the table's rows through row_ptrs
  bool pending_backward = false;
  // What the rows' embedding elements are stored as (the owner's value_type).
  ValueType value_type = ValueType::kFloat32;
  // Backend memory: the unique rows in use when only the device knows them (the rows from there
  // to num_unique are padding); null when num_unique is the count.
  const uint64_t* live_rows = nullptr;

 private:
  NonfiniteReport nonfinite_report;
};

}  // namespace dynemb::embedding::detail

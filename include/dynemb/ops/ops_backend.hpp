// One backend's ops: the CPU's or the GPU's implementation of every op, chosen once by
// ops_backend(backend), as make_table chooses a table. The public ops (dedup.hpp, pooling.hpp,
// row_ops.hpp) check their arguments and call it; the training step (step_ops.hpp) and the
// embedding part hold one and call it without re-checking. Each member is the op of the same name
// in those headers, on checked input, with the same result on every backend (docs/ops.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "dynemb/core/initializer.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/step_types.hpp"
#include "dynemb/ops/stream_fan.hpp"

namespace dynemb {

namespace ops::detail {
class StepWorkspace;
struct TableSpread;
struct TableRows;
struct TableBatch;
}  // namespace ops::detail

class OpsBackend {
 public:
  virtual ~OpsBackend() = default;

  // The backend whose memory the ops' pointers are in.
  virtual Backend backend() const = 0;
  // Whether that memory is host memory (the caller may read and write it directly).
  virtual bool memory_is_host() const = 0;
  // Whether the grouped gradient reduction reads each id's bag from IdGroups::bag_by_row (so a
  // training dedup should write it) rather than working the bags out from the offsets.
  virtual bool reads_bag_by_row() const = 0;
  // Waits for `stream`'s work (nothing to wait for on the CPU).
  virtual void sync(StreamHandle stream) const = 0;

  // --- the public ops (n > 0 and arguments checked) ---------------------------------------------
  virtual size_t dedup(size_t n, const int64_t* keys, int64_t* unique_keys, uint32_t* inverse,
                       uint32_t* counts, StreamHandle stream) const = 0;
  virtual size_t dedup(size_t n, const uint64_t* keys, uint64_t* unique_keys, uint32_t* inverse,
                       uint32_t* counts, StreamHandle stream) const = 0;
  // The offsets and indices checks of validate_lookup (the shapes are checked already).
  virtual void validate_lookup_data(const char* where, std::span<const LookupFeature> features,
                                    StreamHandle stream) const = 0;
  virtual void pooled_lookup(std::span<const LookupFeature> features,
                             std::span<const LookupOutput> outputs, StreamHandle stream) const = 0;
  virtual void reduce_gradients(std::span<const LookupFeature> features,
                                std::span<const LookupOutput> grads,
                                std::span<const LookupOutput> row_grads,
                                StreamHandle stream) const = 0;
  virtual void gather_rows(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                           float* dst, uint32_t dst_stride, uint32_t width,
                           StreamHandle stream) const = 0;
  virtual void scatter_rows(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                            float* dst, uint32_t dst_stride, uint32_t width,
                            StreamHandle stream) const = 0;
  virtual void fill_initial_rows(size_t n, const int64_t* keys, const bool* flags, bool when,
                                 const InitializerOptions& init, float* rows, uint32_t stride,
                                 uint32_t width, StreamHandle stream) const = 0;
  virtual void fill_initial_rows(size_t n, const uint64_t* keys, const bool* flags, bool when,
                                 const InitializerOptions& init, float* rows, uint32_t stride,
                                 uint32_t width, StreamHandle stream) const = 0;
  virtual size_t select_indices(size_t n, const bool* flags, bool value, uint32_t* out,
                                StreamHandle stream) const = 0;
  virtual void fill_flags(size_t n, bool value, bool* flags, StreamHandle stream) const = 0;
  virtual void or_flags(size_t n, const bool* flags, bool when, bool* out,
                        StreamHandle stream) const = 0;
  virtual size_t flag_nonfinite_rows(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                                     bool* flags, StreamHandle stream) const = 0;
  virtual void apply_optimizer_rows(const OptimizerOptions& optimizer, size_t n, float* rows,
                                    uint32_t row_stride, const float* grads, uint32_t grad_stride,
                                    uint32_t dim, const bool* skip, StreamHandle stream) const = 0;
  // apply_optimizer_row_ptrs; with `nonfinite` not null, apply_optimizer_row_ptrs_guarded.
  virtual void apply_optimizer_row_ptrs(const OptimizerOptions& optimizer, size_t n,
                                        float* const* rows, const float* grads,
                                        uint32_t grad_stride, uint32_t dim, const bool* skip,
                                        uint64_t* nonfinite, StreamHandle stream) const = 0;

  // --- the training step's entries (step_ops.hpp, table_keys.hpp; their checks done) -----------
  virtual size_t dedup_grouped(size_t n, const int64_t* keys, int64_t* unique_keys,
                               uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                               uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                               const char* where, ops::detail::ReadAlong along,
                               ops::detail::StepWorkspace& workspace,
                               StreamHandle stream) const = 0;
  virtual size_t dedup_grouped(size_t n, const uint64_t* keys, uint64_t* unique_keys,
                               uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                               uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                               const char* where, ops::detail::ReadAlong along,
                               ops::detail::StepWorkspace& workspace,
                               StreamHandle stream) const = 0;
  // num_rows > 0.
  virtual void reduce_gradients_grouped(const LookupFeature& feature, ops::detail::IdGroups groups,
                                        const LookupOutput& grads, const LookupOutput& row_grads,
                                        StreamHandle stream) const = 0;
  // num_rows > 0.
  virtual void reduce_and_optimize_row_ptrs(
      const OptimizerOptions& optimizer, const LookupFeature& feature, ops::detail::IdGroups groups,
      const LookupOutput& grads, float* const* rows, const bool* skip, uint64_t* nonfinite,
      ops::detail::StepWorkspace& workspace, StreamHandle stream) const = 0;
  // num_rows > 0. reduce_and_optimize_row_ptrs with the gradient sums in any order.
  virtual void reduce_and_optimize_row_ptrs_unordered(
      const OptimizerOptions& optimizer, const LookupFeature& feature, ops::detail::IdGroups groups,
      const LookupOutput& grads, float* const* rows, const bool* skip, uint64_t* nonfinite,
      ops::detail::StepWorkspace& workspace, StreamHandle stream) const = 0;
  // n > 0 from here to read_words.
  virtual void count_flags(size_t n, const bool* flags, bool value, uint64_t* counter,
                           StreamHandle stream) const = 0;
  virtual void apply_optimizer_rows_guarded(const OptimizerOptions& optimizer, size_t n,
                                            float* rows, uint32_t row_stride, const float* grads,
                                            uint32_t grad_stride, uint32_t dim, const bool* skip,
                                            uint64_t* nonfinite, StreamHandle stream) const = 0;
  virtual void resolve_missing_rows(size_t n, float** rows, bool* missing, float* fallback,
                                    uint32_t fallback_stride, const bool* founds, uint64_t* created,
                                    uint64_t* missing_count, StreamHandle stream) const = 0;
  virtual void read_words(const uint64_t* words, size_t count, uint64_t* host,
                          StreamHandle stream) const = 0;
  virtual void combine_table_keys(uint32_t table, uint32_t shift, size_t n, const int64_t* keys,
                                  const int64_t* offsets, size_t num_bags, uint64_t base,
                                  uint64_t bag_base, uint64_t* combined_keys,
                                  int64_t* combined_offsets, uint64_t* status,
                                  StreamHandle stream) const = 0;
  virtual void combine_table_keys(uint32_t table, uint32_t shift, size_t n, const uint64_t* keys,
                                  const int64_t* offsets, size_t num_bags, uint64_t base,
                                  uint64_t bag_base, uint64_t* combined_keys,
                                  int64_t* combined_offsets, uint64_t* status,
                                  StreamHandle stream) const = 0;
  virtual void split_table_keys(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                                uint32_t shift, int64_t* keys, uint64_t* bounds,
                                StreamHandle stream) const = 0;
  virtual void split_table_keys(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                                uint32_t shift, uint64_t* keys, uint64_t* bounds,
                                StreamHandle stream) const = 0;

  // dedup_grouped of 64-bit keys without a host read (step_ops.hpp: dedup_grouped_async).
  virtual void dedup_grouped_async(size_t n, const uint64_t* keys, uint64_t* unique_keys,
                                   uint32_t* inverse, uint32_t* ids_by_row, uint32_t* row_begin,
                                   uint32_t* bag_by_row, const int64_t* offsets, size_t num_bags,
                                   int end_bit, uint64_t* unique_count,
                                   ops::detail::StepWorkspace& workspace,
                                   StreamHandle stream) const = 0;
  // combine_tables_narrow (table_keys.hpp); false, nothing issued, where the backend has none.
  virtual bool combine_tables_narrow(std::span<const ops::detail::TableBatch> /*tables*/,
                                     uint32_t /*shift*/, bool /*bags*/,
                                     int64_t* /*combined_offsets*/, uint64_t* /*status*/,
                                     ops::detail::StepWorkspace& /*workspace*/,
                                     StreamHandle /*stream*/) const {
    return false;
  }
  virtual void spread_table_keys(const ops::detail::TableSpread& spread,
                                 StreamHandle stream) const = 0;
  virtual void gather_table_rows(const ops::detail::TableSpread& spread,
                                 const ops::detail::TableRows& rows, StreamHandle stream) const = 0;

  // Whether `stream`'s work is being captured into a CUDA graph (CPU: never).
  virtual bool capturing(StreamHandle stream) const = 0;
  // Up to `streams` side streams on `device` (stream_fan.hpp); the CPU's has none.
  virtual std::unique_ptr<ops::detail::StreamFan> make_stream_fan(size_t streams,
                                                                  int device) const = 0;

  // --- the step workspace's memory (step_workspace.hpp) -----------------------------------------
  // Host memory the backend's asynchronous copies may target (pinned on CUDA); null if none.
  virtual void* alloc_host_words(size_t bytes) const = 0;
  virtual void free_host_words(void* p) const noexcept = 0;
  // out[i] = i for i < n (backend memory), ordered on `stream`.
  virtual void fill_iota(uint32_t* out, size_t n, StreamHandle stream) const = 0;
};

// The ops of `backend`, made once and shared (they hold no state). Throws NotAvailable for CUDA in
// a build without the CUDA backend.
const OpsBackend& ops_backend(Backend backend);

}  // namespace dynemb

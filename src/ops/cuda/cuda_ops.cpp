// The GPU's OpsBackend: the ops of src/ops/cuda/ on device memory, ordered on the given stream.

#include "backend_instances.hpp"
#include "cuda/cuda_kernels.hpp"

namespace dynemb::ops::detail {
namespace {

class CudaOps final : public OpsBackend {
 public:
  Backend backend() const override { return Backend::kCuda; }
  bool memory_is_host() const override { return false; }
  bool reads_bag_by_row() const override { return true; }
  void sync(StreamHandle stream) const override { sync_stream_cuda(stream); }

  size_t dedup(size_t n, const int64_t* keys, int64_t* unique_keys, uint32_t* inverse,
               uint32_t* counts, StreamHandle stream) const override {
    return dedup_cuda(n, keys, unique_keys, inverse, counts, stream);
  }
  size_t dedup(size_t n, const uint64_t* keys, uint64_t* unique_keys, uint32_t* inverse,
               uint32_t* counts, StreamHandle stream) const override {
    return dedup_cuda(n, keys, unique_keys, inverse, counts, stream);
  }
  void validate_lookup_data(const char* where, std::span<const LookupFeature> features,
                            StreamHandle stream) const override {
    validate_lookup_data_cuda(where, features, stream);
  }
  void pooled_lookup(std::span<const LookupFeature> features, std::span<const LookupOutput> outputs,
                     StreamHandle stream) const override {
    pooled_lookup_cuda(features, outputs, stream);
  }
  void reduce_gradients(std::span<const LookupFeature> features,
                        std::span<const LookupOutput> grads,
                        std::span<const LookupOutput> row_grads,
                        StreamHandle stream) const override {
    reduce_gradients_cuda(features, grads, row_grads, stream);
  }
  void gather_rows(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                   float* dst, uint32_t dst_stride, uint32_t width,
                   StreamHandle stream) const override {
    gather_rows_cuda(n, index, src, src_stride, dst, dst_stride, width, stream);
  }
  void scatter_rows(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                    float* dst, uint32_t dst_stride, uint32_t width,
                    StreamHandle stream) const override {
    scatter_rows_cuda(n, index, src, src_stride, dst, dst_stride, width, stream);
  }
  void fill_initial_rows(size_t n, const int64_t* keys, const bool* flags, bool when,
                         const InitializerOptions& init, float* rows, uint32_t stride,
                         uint32_t width, StreamHandle stream) const override {
    fill_initial_rows_cuda(n, keys, flags, when, init, rows, stride, width, stream);
  }
  void fill_initial_rows(size_t n, const uint64_t* keys, const bool* flags, bool when,
                         const InitializerOptions& init, float* rows, uint32_t stride,
                         uint32_t width, StreamHandle stream) const override {
    fill_initial_rows_cuda(n, keys, flags, when, init, rows, stride, width, stream);
  }
  size_t select_indices(size_t n, const bool* flags, bool value, uint32_t* out,
                        StreamHandle stream) const override {
    return select_indices_cuda(n, flags, value, out, stream);
  }
  void fill_flags(size_t n, bool value, bool* flags, StreamHandle stream) const override {
    fill_flags_cuda(n, value, flags, stream);
  }
  void or_flags(size_t n, const bool* flags, bool when, bool* out,
                StreamHandle stream) const override {
    or_flags_cuda(n, flags, when, out, stream);
  }
  size_t flag_nonfinite_rows(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                             bool* flags, StreamHandle stream) const override {
    return flag_nonfinite_rows_cuda(n, grads, stride, dim, flags, stream);
  }
  void apply_optimizer_rows(const OptimizerOptions& o, size_t n, float* rows, uint32_t row_stride,
                            const float* grads, uint32_t grad_stride, uint32_t dim,
                            const bool* skip, StreamHandle stream) const override {
    apply_optimizer_rows_cuda(o, n, rows, row_stride, grads, grad_stride, dim, skip, stream);
  }
  void apply_optimizer_row_ptrs(const OptimizerOptions& o, size_t n, float* const* rows,
                                const float* grads, uint32_t grad_stride, uint32_t dim,
                                const bool* skip, uint64_t* nonfinite,
                                StreamHandle stream) const override {
    if (n == 0) return;
    apply_optimizer_row_ptrs_cuda(o, n, rows, grads, grad_stride, dim, skip, nonfinite, stream);
  }

  size_t dedup_grouped(size_t n, const int64_t* keys, int64_t* unique_keys, uint32_t* inverse,
                       uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                       const int64_t* offsets, size_t num_bags, const char* where, ReadAlong along,
                       StepWorkspace& workspace, StreamHandle stream) const override {
    return dedup_grouped_cuda(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row,
                              offsets, num_bags, where, along, &workspace, stream);
  }
  size_t dedup_grouped(size_t n, const uint64_t* keys, uint64_t* unique_keys, uint32_t* inverse,
                       uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                       const int64_t* offsets, size_t num_bags, const char* where, ReadAlong along,
                       StepWorkspace& workspace, StreamHandle stream) const override {
    return dedup_grouped_cuda(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row,
                              offsets, num_bags, where, along, &workspace, stream);
  }
  void reduce_gradients_grouped(const LookupFeature& feature, IdGroups groups,
                                const LookupOutput& grads, const LookupOutput& row_grads,
                                StreamHandle stream) const override {
    reduce_gradients_grouped_cuda(feature, groups, grads, row_grads, stream);
  }
  void reduce_and_optimize_row_ptrs(const OptimizerOptions& o, const LookupFeature& feature,
                                    IdGroups groups, const LookupOutput& grads, float* const* rows,
                                    const bool* skip, uint64_t* nonfinite, StepWorkspace& workspace,
                                    StreamHandle stream) const override {
    reduce_and_optimize_row_ptrs_cuda(o, feature, groups, grads, rows, skip, nonfinite, workspace,
                                      stream);
  }
  void reduce_and_optimize_row_ptrs_unordered(const OptimizerOptions& o,
                                              const LookupFeature& feature, IdGroups,
                                              const LookupOutput& grads, float* const* rows,
                                              const bool* skip, uint64_t* nonfinite,
                                              StepWorkspace& workspace,
                                              StreamHandle stream) const override {
    reduce_and_optimize_row_ptrs_atomic_cuda(o, feature, grads, rows, skip, nonfinite, workspace,
                                             stream);
  }
  void count_flags(size_t n, const bool* flags, bool value, uint64_t* counter,
                   StreamHandle stream) const override {
    count_flags_cuda(n, flags, value, counter, stream);
  }
  void apply_optimizer_rows_guarded(const OptimizerOptions& o, size_t n, float* rows,
                                    uint32_t row_stride, const float* grads, uint32_t grad_stride,
                                    uint32_t dim, const bool* skip, uint64_t* nonfinite,
                                    StreamHandle stream) const override {
    apply_optimizer_rows_guarded_cuda(o, n, rows, row_stride, grads, grad_stride, dim, skip,
                                      nonfinite, stream);
  }
  void resolve_missing_rows(size_t n, float** rows, bool* missing, float* fallback,
                            uint32_t fallback_stride, const bool* founds, uint64_t* created,
                            uint64_t* missing_count, StreamHandle stream) const override {
    resolve_missing_rows_cuda(n, rows, missing, fallback, fallback_stride, founds, created,
                              missing_count, stream);
  }
  void read_words(const uint64_t* words, size_t count, uint64_t* host,
                  StreamHandle stream) const override {
    read_words_cuda(words, count, host, stream);
  }
  void combine_table_keys(uint32_t table, uint32_t shift, size_t n, const int64_t* keys,
                          const int64_t* offsets, size_t num_bags, uint64_t base, uint64_t bag_base,
                          uint64_t* combined_keys, int64_t* combined_offsets, uint64_t* status,
                          StreamHandle stream) const override {
    combine_table_keys_cuda(table, shift, n, keys, offsets, num_bags, base, bag_base, combined_keys,
                            combined_offsets, status, stream);
  }
  void combine_table_keys(uint32_t table, uint32_t shift, size_t n, const uint64_t* keys,
                          const int64_t* offsets, size_t num_bags, uint64_t base, uint64_t bag_base,
                          uint64_t* combined_keys, int64_t* combined_offsets, uint64_t* status,
                          StreamHandle stream) const override {
    combine_table_keys_cuda(table, shift, n, keys, offsets, num_bags, base, bag_base, combined_keys,
                            combined_offsets, status, stream);
  }
  void split_table_keys(size_t u, const uint64_t* unique_keys, uint32_t num_tables, uint32_t shift,
                        int64_t* keys, uint64_t* bounds, StreamHandle stream) const override {
    split_table_keys_cuda(u, unique_keys, num_tables, shift, keys, bounds, stream);
  }
  void split_table_keys(size_t u, const uint64_t* unique_keys, uint32_t num_tables, uint32_t shift,
                        uint64_t* keys, uint64_t* bounds, StreamHandle stream) const override {
    split_table_keys_cuda(u, unique_keys, num_tables, shift, keys, bounds, stream);
  }

  void dedup_grouped_async(size_t n, const uint64_t* keys, uint64_t* unique_keys, uint32_t* inverse,
                           uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                           const int64_t* offsets, size_t num_bags, int end_bit,
                           uint64_t* unique_count, StepWorkspace& workspace,
                           StreamHandle stream) const override {
    dedup_grouped_async_cuda(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row,
                             offsets, num_bags, end_bit, unique_count, workspace, stream);
  }
  bool combine_tables_narrow(std::span<const TableBatch> tables, uint32_t shift, bool bags,
                             int64_t* combined_offsets, uint64_t* status, StepWorkspace& workspace,
                             StreamHandle stream) const override {
    return combine_tables_narrow_cuda(tables, shift, bags, combined_offsets, status, workspace,
                                      stream);
  }
  void spread_table_keys(const TableSpread& spread, StreamHandle stream) const override {
    spread_table_keys_cuda(spread, stream);
  }
  void gather_table_rows(const TableSpread& spread, const TableRows& rows,
                         StreamHandle stream) const override {
    gather_table_rows_cuda(spread, rows, stream);
  }
  bool capturing(StreamHandle stream) const override { return stream_capturing_cuda(stream); }
  std::unique_ptr<StreamFan> make_stream_fan(size_t streams, int device) const override {
    return make_stream_fan_cuda(streams, device);
  }
  void* alloc_host_words(size_t bytes) const override { return pinned_host_alloc_cuda(bytes); }
  void free_host_words(void* p) const noexcept override { pinned_host_free_cuda(p); }
  void fill_iota(uint32_t* out, size_t n, StreamHandle stream) const override {
    fill_iota_cuda(out, n, stream);
  }
};

}  // namespace

const OpsBackend& cuda_ops() {
  static const CudaOps ops;
  return ops;
}

}  // namespace dynemb::ops::detail

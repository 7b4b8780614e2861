// The CPU's OpsBackend: the ops of src/ops/cpu/ on host memory (the stream is ignored).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend_instances.hpp"
#include "cpu/cpu_kernels.hpp"

namespace dynemb::ops::detail {
namespace {

class CpuOps final : public OpsBackend {
 public:
  Backend backend() const override { return Backend::kCpu; }
  bool memory_is_host() const override { return true; }
  bool reads_bag_by_row() const override { return false; }
  void sync(StreamHandle) const override {}

  size_t dedup(size_t n, const int64_t* keys, int64_t* unique_keys, uint32_t* inverse,
               uint32_t* counts, StreamHandle) const override {
    return dedup_cpu(n, keys, unique_keys, inverse, counts);
  }
  size_t dedup(size_t n, const uint64_t* keys, uint64_t* unique_keys, uint32_t* inverse,
               uint32_t* counts, StreamHandle) const override {
    return dedup_cpu(n, keys, unique_keys, inverse, counts);
  }
  void validate_lookup_data(const char* where, std::span<const LookupFeature> features,
                            StreamHandle) const override {
    validate_lookup_data_host(where, features);
  }
  void pooled_lookup(std::span<const LookupFeature> features, std::span<const LookupOutput> outputs,
                     StreamHandle) const override {
    pooled_lookup_cpu(features, outputs);
  }
  void reduce_gradients(std::span<const LookupFeature> features,
                        std::span<const LookupOutput> grads,
                        std::span<const LookupOutput> row_grads, StreamHandle) const override {
    reduce_gradients_cpu(features, grads, row_grads);
  }
  void gather_rows(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                   float* dst, uint32_t dst_stride, uint32_t width, StreamHandle) const override {
    gather_rows_cpu(n, index, src, src_stride, dst, dst_stride, width);
  }
  void scatter_rows(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                    float* dst, uint32_t dst_stride, uint32_t width, StreamHandle) const override {
    scatter_rows_cpu(n, index, src, src_stride, dst, dst_stride, width);
  }
  void fill_initial_rows(size_t n, const int64_t* keys, const bool* flags, bool when,
                         const InitializerOptions& init, float* rows, uint32_t stride,
                         uint32_t width, StreamHandle) const override {
    fill_initial_rows_cpu(n, keys, flags, when, init, rows, stride, width);
  }
  void fill_initial_rows(size_t n, const uint64_t* keys, const bool* flags, bool when,
                         const InitializerOptions& init, float* rows, uint32_t stride,
                         uint32_t width, StreamHandle) const override {
    fill_initial_rows_cpu(n, keys, flags, when, init, rows, stride, width);
  }
  size_t select_indices(size_t n, const bool* flags, bool value, uint32_t* out,
                        StreamHandle) const override {
    return select_indices_cpu(n, flags, value, out);
  }
  void fill_flags(size_t n, bool value, bool* flags, StreamHandle) const override {
    for (size_t i = 0; i < n; ++i) flags[i] = value;
  }
  void or_flags(size_t n, const bool* flags, bool when, bool* out, StreamHandle) const override {
    for (size_t i = 0; i < n; ++i) out[i] = out[i] || flags[i] == when;
  }
  size_t flag_nonfinite_rows(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                             bool* flags, StreamHandle) const override {
    return flag_nonfinite_rows_cpu(n, grads, stride, dim, flags);
  }
  void apply_optimizer_rows(const OptimizerOptions& o, size_t n, float* rows, uint32_t row_stride,
                            const float* grads, uint32_t grad_stride, uint32_t dim,
                            const bool* skip, StreamHandle) const override {
    apply_optimizer_rows_cpu(o, n, rows, row_stride, grads, grad_stride, dim, skip);
  }
  void apply_optimizer_row_ptrs(const OptimizerOptions& o, size_t n, float* const* rows,
                                const float* grads, uint32_t grad_stride, uint32_t dim,
                                const bool* skip, uint64_t* nonfinite,
                                StreamHandle) const override {
    apply_optimizer_row_ptrs_cpu(o, n, rows, grads, grad_stride, dim, skip, nonfinite);
  }

  size_t dedup_grouped(size_t n, const int64_t* keys, int64_t* unique_keys, uint32_t* inverse,
                       uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                       const int64_t* offsets, size_t num_bags, const char* where, ReadAlong along,
                       StepWorkspace&, StreamHandle) const override {
    return grouped(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row, offsets,
                   num_bags, where, along);
  }
  size_t dedup_grouped(size_t n, const uint64_t* keys, uint64_t* unique_keys, uint32_t* inverse,
                       uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                       const int64_t* offsets, size_t num_bags, const char* where, ReadAlong along,
                       StepWorkspace&, StreamHandle) const override {
    return grouped(n, keys, unique_keys, inverse, ids_by_row, row_begin, bag_by_row, offsets,
                   num_bags, where, along);
  }
  void reduce_gradients_grouped(const LookupFeature& feature, IdGroups groups,
                                const LookupOutput& grads, const LookupOutput& row_grads,
                                StreamHandle) const override {
    reduce_gradients_grouped_cpu(feature, groups, grads, row_grads);
  }
  void reduce_and_optimize_row_ptrs(const OptimizerOptions& o, const LookupFeature& feature,
                                    IdGroups groups, const LookupOutput& grads, float* const* rows,
                                    const bool* skip, uint64_t* nonfinite, StepWorkspace&,
                                    StreamHandle) const override {
    reduce_and_optimize_row_ptrs_cpu(o, feature, groups, grads, rows, skip, nonfinite);
  }
  // The host's ordered reduction is no slower than an unordered one would be.
  void reduce_and_optimize_row_ptrs_unordered(const OptimizerOptions& o,
                                              const LookupFeature& feature, IdGroups groups,
                                              const LookupOutput& grads, float* const* rows,
                                              const bool* skip, uint64_t* nonfinite, StepWorkspace&,
                                              StreamHandle) const override {
    reduce_and_optimize_row_ptrs_cpu(o, feature, groups, grads, rows, skip, nonfinite);
  }
  void count_flags(size_t n, const bool* flags, bool value, uint64_t* counter,
                   StreamHandle) const override {
    uint64_t c = 0;
    for (size_t i = 0; i < n; ++i) c += flags[i] == value;
    *counter += c;
  }
  void apply_optimizer_rows_guarded(const OptimizerOptions& o, size_t n, float* rows,
                                    uint32_t row_stride, const float* grads, uint32_t grad_stride,
                                    uint32_t dim, const bool* skip, uint64_t* nonfinite,
                                    StreamHandle) const override {
    apply_optimizer_rows_guarded_cpu(o, n, rows, row_stride, grads, grad_stride, dim, skip,
                                     nonfinite);
  }
  void resolve_missing_rows(size_t n, float** rows, bool* missing, float* fallback,
                            uint32_t fallback_stride, const bool* founds, uint64_t* created,
                            uint64_t* missing_count, StreamHandle) const override {
    resolve_missing_rows_cpu(n, rows, missing, fallback, fallback_stride, founds, created,
                             missing_count);
  }
  void read_words(const uint64_t* words, size_t count, uint64_t* host,
                  StreamHandle) const override {
    std::memcpy(host, words, count * sizeof(uint64_t));
  }
  void combine_table_keys(uint32_t table, uint32_t shift, size_t n, const int64_t* keys,
                          const int64_t* offsets, size_t num_bags, uint64_t base, uint64_t bag_base,
                          uint64_t* combined_keys, int64_t* combined_offsets, uint64_t* status,
                          StreamHandle) const override {
    combine_table_keys_cpu(table, shift, n, keys, offsets, num_bags, base, bag_base, combined_keys,
                           combined_offsets, status);
  }
  void combine_table_keys(uint32_t table, uint32_t shift, size_t n, const uint64_t* keys,
                          const int64_t* offsets, size_t num_bags, uint64_t base, uint64_t bag_base,
                          uint64_t* combined_keys, int64_t* combined_offsets, uint64_t* status,
                          StreamHandle) const override {
    combine_table_keys_cpu(table, shift, n, keys, offsets, num_bags, base, bag_base, combined_keys,
                           combined_offsets, status);
  }
  void split_table_keys(size_t u, const uint64_t* unique_keys, uint32_t num_tables, uint32_t shift,
                        int64_t* keys, uint64_t* bounds, StreamHandle) const override {
    split_table_keys_cpu(u, unique_keys, num_tables, shift, keys, bounds);
  }
  void split_table_keys(size_t u, const uint64_t* unique_keys, uint32_t num_tables, uint32_t shift,
                        uint64_t* keys, uint64_t* bounds, StreamHandle) const override {
    split_table_keys_cpu(u, unique_keys, num_tables, shift, keys, bounds);
  }

  void dedup_grouped_async(size_t n, const uint64_t* keys, uint64_t* unique_keys, uint32_t* inverse,
                           uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                           const int64_t* offsets, size_t num_bags, int, uint64_t* unique_count,
                           StepWorkspace&, StreamHandle) const override {
    // Every bit is sorted here; the offsets were clamped by combine_table_keys (and checked there).
    const size_t u = n == 0 ? 0 : dedup_cpu(n, keys, unique_keys, inverse, nullptr);
    std::vector<uint32_t> own_ids(ids_by_row == nullptr ? n : 0);
    if (ids_by_row == nullptr) ids_by_row = own_ids.data();
    group_ids_cpu(n, inverse, u, ids_by_row, row_begin);
    if (bag_by_row != nullptr) bags_by_row_cpu(n, ids_by_row, offsets, num_bags, bag_by_row);
    *unique_count = u;
  }
  void spread_table_keys(const TableSpread& spread, StreamHandle) const override {
    spread_table_keys_cpu(spread);
  }
  void gather_table_rows(const TableSpread& spread, const TableRows& rows,
                         StreamHandle) const override {
    gather_table_rows_cpu(spread, rows);
  }

  bool capturing(StreamHandle) const override { return false; }
  std::unique_ptr<StreamFan> make_stream_fan(size_t, int) const override {
    // The CPU's work runs on the calling thread: no side streams.
    class NoFan final : public StreamFan {
     public:
      size_t size() const override { return 0; }
      StreamHandle stream(size_t) const override { return nullptr; }
      void fork(StreamHandle) override {}
      void join(StreamHandle) override {}
    };
    return std::make_unique<NoFan>();
  }

  void* alloc_host_words(size_t bytes) const override { return std::malloc(bytes); }
  void free_host_words(void* p) const noexcept override { std::free(p); }
  void fill_iota(uint32_t* out, size_t n, StreamHandle) const override {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(i);
  }

 private:
  // dedup, the ids grouped by row, the offsets checked, each id's bag, `along` copied.
  template <TableKey K>
  static size_t grouped(size_t n, const K* keys, K* unique_keys, uint32_t* inverse,
                        uint32_t* ids_by_row, uint32_t* row_begin, uint32_t* bag_by_row,
                        const int64_t* offsets, size_t num_bags, const char* where,
                        ReadAlong along) {
    const size_t u = n == 0 ? 0 : dedup_cpu(n, keys, unique_keys, inverse, nullptr);
    std::vector<uint32_t> own_ids(ids_by_row == nullptr ? n : 0);
    if (ids_by_row == nullptr) ids_by_row = own_ids.data();
    group_ids_cpu(n, inverse, u, ids_by_row, row_begin);
    const LookupFeature f = offsets_feature(n, inverse, u, offsets, num_bags);
    validate_lookup_data_host(where, {&f, 1});
    if (bag_by_row != nullptr) bags_by_row_cpu(n, ids_by_row, offsets, num_bags, bag_by_row);
    if (along.count > 0) std::memcpy(along.host, along.counters, along.count * sizeof(uint64_t));
    return u;
  }
};

}  // namespace

const OpsBackend& cpu_ops() {
  static const CpuOps ops;
  return ops;
}

}  // namespace dynemb::ops::detail

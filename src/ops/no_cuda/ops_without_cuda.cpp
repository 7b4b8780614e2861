// Compiled only when the CUDA backend is not built: every CUDA op says so.
#include "backends.hpp"

namespace dynemb::detail {

template <TableKey K>
size_t dedup_cuda(size_t, const K*, K*, uint32_t*, uint32_t*, StreamHandle) {
  no_cuda_ops("dedup");
}
template size_t dedup_cuda<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                                    StreamHandle);
template size_t dedup_cuda<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*, uint32_t*,
                                     StreamHandle);
void validate_lookup_data_cuda(const char* where, std::span<const LookupFeature>, StreamHandle) {
  no_cuda_ops(where);
}
void pooled_lookup_cuda(std::span<const LookupFeature>, std::span<const LookupOutput>,
                        StreamHandle) {
  no_cuda_ops("pooled_lookup");
}
void reduce_gradients_cuda(std::span<const LookupFeature>, std::span<const LookupOutput>,
                           std::span<const LookupOutput>, StreamHandle) {
  no_cuda_ops("reduce_gradients");
}
void gather_rows_cuda(size_t, const uint32_t*, const float*, uint32_t, float*, uint32_t, uint32_t,
                      StreamHandle) {
  no_cuda_ops("gather_rows");
}
void scatter_rows_cuda(size_t, const uint32_t*, const float*, uint32_t, float*, uint32_t, uint32_t,
                       StreamHandle) {
  no_cuda_ops("scatter_rows");
}
template <TableKey K>
void fill_initial_rows_cuda(size_t, const K*, const bool*, bool, const InitializerOptions&, float*,
                            uint32_t, uint32_t, StreamHandle) {
  no_cuda_ops("fill_initial_rows");
}
template void fill_initial_rows_cuda<int64_t>(size_t, const int64_t*, const bool*, bool,
                                              const InitializerOptions&, float*, uint32_t, uint32_t,
                                              StreamHandle);
template void fill_initial_rows_cuda<uint64_t>(size_t, const uint64_t*, const bool*, bool,
                                               const InitializerOptions&, float*, uint32_t,
                                               uint32_t, StreamHandle);
size_t select_indices_cuda(size_t, const bool*, bool, uint32_t*, StreamHandle) {
  no_cuda_ops("select_indices");
}
void fill_flags_cuda(size_t, bool, bool*, StreamHandle) {
  no_cuda_ops("fill_flags");
}
void or_flags_cuda(size_t, const bool*, bool, bool*, StreamHandle) {
  no_cuda_ops("or_flags");
}
size_t flag_nonfinite_rows_cuda(size_t, const float*, uint32_t, uint32_t, bool*, StreamHandle) {
  no_cuda_ops("flag_nonfinite_rows");
}
void apply_optimizer_rows_cuda(const OptimizerOptions&, size_t, float*, uint32_t, const float*,
                               uint32_t, uint32_t, const bool*, StreamHandle) {
  no_cuda_ops("apply_optimizer_rows");
}

template <TableKey K>
size_t dedup_grouped_cuda(size_t, const K*, K*, uint32_t*, uint32_t*, uint32_t*, uint32_t*,
                          const int64_t*, size_t, const char*, ReadAlong, StepWorkspace*,
                          StreamHandle) {
  no_cuda_ops("dedup");
}
template size_t dedup_grouped_cuda<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                                            uint32_t*, uint32_t*, const int64_t*, size_t,
                                            const char*, ReadAlong, StepWorkspace*, StreamHandle);
template size_t dedup_grouped_cuda<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*,
                                             uint32_t*, uint32_t*, uint32_t*, const int64_t*,
                                             size_t, const char*, ReadAlong, StepWorkspace*,
                                             StreamHandle);
void reduce_gradients_grouped_cuda(const LookupFeature&, IdGroups, const LookupOutput&,
                                   const LookupOutput&, StreamHandle) {
  no_cuda_ops("reduce_gradients");
}
void count_flags_cuda(size_t, const bool*, bool, uint64_t*, StreamHandle) {
  no_cuda_ops("count_flags");
}
void apply_optimizer_rows_guarded_cuda(const OptimizerOptions&, size_t, float*, uint32_t,
                                       const float*, uint32_t, uint32_t, const bool*, uint64_t*,
                                       StreamHandle) {
  no_cuda_ops("apply_optimizer_rows");
}
void reduce_and_optimize_row_ptrs_cuda(const OptimizerOptions&, const LookupFeature&, IdGroups,
                                       const LookupOutput&, float* const*, const bool*, uint64_t*,
                                       StepWorkspace&, StreamHandle) {
  no_cuda_ops("reduce_and_optimize_row_ptrs");
}
void apply_optimizer_row_ptrs_cuda(const OptimizerOptions&, size_t, float* const*, const float*,
                                   uint32_t, uint32_t, const bool*, uint64_t*, StreamHandle) {
  no_cuda_ops("apply_optimizer_row_ptrs");
}
void resolve_missing_rows_cuda(size_t, float**, bool*, float*, uint32_t, const bool*, uint64_t*,
                               uint64_t*, StreamHandle) {
  no_cuda_ops("resolve_missing_rows");
}
void read_words_cuda(const uint64_t*, size_t, uint64_t*, StreamHandle) {
  no_cuda_ops("read_words");
}
void fill_iota_cuda(uint32_t*, size_t, StreamHandle) {
  no_cuda_ops("fill_iota");
}
void* pinned_host_alloc_cuda(size_t) {
  no_cuda_ops("StepWorkspace");
}
void pinned_host_free_cuda(void*) noexcept {}
void sync_stream_cuda(StreamHandle) {
  no_cuda_ops("StepWorkspace");
}

template <TableKey K>
void combine_table_keys_cuda(uint32_t, uint32_t, size_t, const K*, const int64_t*, size_t, uint64_t,
                             uint64_t, uint64_t*, int64_t*, uint64_t*, StreamHandle) {
  no_cuda_ops("combine_table_keys");
}
template <TableKey K>
void split_table_keys_cuda(size_t, const uint64_t*, uint32_t, uint32_t, K*, uint64_t*,
                           StreamHandle) {
  no_cuda_ops("split_table_keys");
}
template void combine_table_keys_cuda<int64_t>(uint32_t, uint32_t, size_t, const int64_t*,
                                               const int64_t*, size_t, uint64_t, uint64_t,
                                               uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void combine_table_keys_cuda<uint64_t>(uint32_t, uint32_t, size_t, const uint64_t*,
                                                const int64_t*, size_t, uint64_t, uint64_t,
                                                uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void split_table_keys_cuda<int64_t>(size_t, const uint64_t*, uint32_t, uint32_t, int64_t*,
                                             uint64_t*, StreamHandle);
template void split_table_keys_cuda<uint64_t>(size_t, const uint64_t*, uint32_t, uint32_t,
                                              uint64_t*, uint64_t*, StreamHandle);

}  // namespace dynemb::detail

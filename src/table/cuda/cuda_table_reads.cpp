// CudaTable: the batch reads (find, find_with_misses, contains, find_pointers). They never change
// a row; find and find_pointers touch no score either.
#include "cuda/bucket_order.hpp"
#include "cuda/cuda_table.hpp"
#include "cuda/kernels.hpp"
#include "dynemb/core/cuda/device_guard.hpp"

namespace dynemb::table::cuda {

template <TableKey K>
void CudaTable<K>::find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
                        StreamHandle stream) {
  if (n == 0) return;
  require_pointer(keys, "find", "keys");
  require_pointer(values, "find", "values");
  lookup("find", n, keys, values, founds, scores, to_stream(stream));
}

template <TableKey K>
size_t CudaTable<K>::find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                                      uint64_t* missed_indices, uint64_t* scores,
                                      StreamHandle stream) {
  if (n == 0) return 0;
  constexpr const char* call = "find_with_misses";
  require_pointer(keys, call, "keys");
  require_pointer(values, call, "values");
  require_pointer(missed_keys, call, "missed_keys");
  require_pointer(missed_indices, call, "missed_indices");
  const cudaStream_t s = to_stream(stream);
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Read guard(order_, s);
  CallScratch scratch(s);
  DeviceArray<bool> founds(n, s);
  if (error_mode()) launch_reserved_check(bits_of(keys), n, scratch.get(), s);
  launch_find(storage_.view(), read_args(n, keys, values, founds.data(), scores, scratch.get()), s);
  launch_select_misses(founds.data(), bits_of(keys), n, reinterpret_cast<uint64_t*>(missed_keys),
                       missed_indices, scratch.get(), s);
  const CallState st = scratch.read();
  report(call, st, bits_of(keys), s);
  return st.count;
}

template <TableKey K>
void CudaTable<K>::contains(size_t n, const K* keys, bool* founds, StreamHandle stream) {
  if (n == 0) return;
  require_pointer(keys, "contains", "keys");
  require_pointer(founds, "contains", "founds");
  lookup("contains", n, keys, nullptr, founds, nullptr, to_stream(stream));
}

template <TableKey K>
void CudaTable<K>::find_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                 uint64_t* scores, StreamHandle stream) {
  if (n == 0) return;
  require_pointer(keys, "find_pointers", "keys");
  require_pointer(rows, "find_pointers", "rows");
  lookup("find_pointers", n, keys, nullptr, founds, scores, to_stream(stream), rows);
}

template <TableKey K>
void CudaTable<K>::lookup(const char* call, size_t n, const K* keys, float* values, bool* founds,
                          uint64_t* scores, cudaStream_t s, float** row_ptrs) {
  core::cuda::DeviceGuard device(options_.device);
  StreamOrder::Read guard(order_, s);
  // A large find on a table with host-resident rows visits its keys in bucket order, copies the
  // rows in HBM and lists those in host memory, which a second kernel then copies in that (address)
  // order, a warp a row. The arrays are freed in stream order, after the kernels.
  DeviceArray<uint32_t> order;
  DeviceArray<uint64_t> host_rows;
  const auto find_in_order = [&](ReadArgs a) {
    if (values != nullptr && visits_in_bucket_order(storage_.view(), n)) {
      order = positions_by_bucket(storage_.view(), a.keys, nullptr, n, s);
      host_rows = DeviceArray<uint64_t>(n, s);
      a.subset = order.data();
      a.host_rows = host_rows.data();
    }
    launch_find(storage_.view(), a, s);
  };
  if (options_.safe_check == SafeCheck::kIgnore) {
    find_in_order(read_args(n, keys, values, founds, scores, nullptr, row_ptrs));
    return;
  }
  CallScratch scratch(s);
  if (error_mode()) launch_reserved_check(bits_of(keys), n, scratch.get(), s);
  find_in_order(read_args(n, keys, values, founds, scores, scratch.get(), row_ptrs));
  if (error_mode()) {
    report(call, scratch.read(), bits_of(keys), s);
  } else {
    reports_->enqueue(call, scratch.get(), s);  // WARNING: logged later, no synchronization
  }
}

template void CudaTable<int64_t>::find(size_t, const int64_t*, float*, bool*, uint64_t*,
                                       StreamHandle);
template size_t CudaTable<int64_t>::find_with_misses(size_t, const int64_t*, float*, int64_t*,
                                                     uint64_t*, uint64_t*, StreamHandle);
template void CudaTable<int64_t>::contains(size_t, const int64_t*, bool*, StreamHandle);
template void CudaTable<int64_t>::find_pointers(size_t, const int64_t*, float**, bool*, uint64_t*,
                                                StreamHandle);
template void CudaTable<int64_t>::lookup(const char*, size_t, const int64_t*, float*, bool*,
                                         uint64_t*, cudaStream_t, float**);
template void CudaTable<uint64_t>::find(size_t, const uint64_t*, float*, bool*, uint64_t*,
                                        StreamHandle);
template size_t CudaTable<uint64_t>::find_with_misses(size_t, const uint64_t*, float*, uint64_t*,
                                                      uint64_t*, uint64_t*, StreamHandle);
template void CudaTable<uint64_t>::contains(size_t, const uint64_t*, bool*, StreamHandle);
template void CudaTable<uint64_t>::find_pointers(size_t, const uint64_t*, float**, bool*, uint64_t*,
                                                 StreamHandle);
template void CudaTable<uint64_t>::lookup(const char*, size_t, const uint64_t*, float*, bool*,
                                          uint64_t*, cudaStream_t, float**);

}  // namespace dynemb::table::cuda

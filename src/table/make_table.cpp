#include "backends.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb {

template <TableKey K>
std::unique_ptr<Table<K>> make_table(Backend backend, const TableOptions& options) {
  validate_table_options(options);
  if (backend == Backend::kCpu) return table::detail::make_cpu_table<K>(options);
#if defined(DYNEMB_WITH_CUDA)
  if (backend == Backend::kCuda) return table::detail::make_cuda_table<K>(options);
#endif
  throw NotAvailable("make_table: backend = " + to_string(backend) +
                     ", not built into this binary (build with nvcc found, DYNEMB_CUDA=AUTO/ON)");
}

bool cuda_backend_available() {
#if defined(DYNEMB_WITH_CUDA)
  return table::detail::cuda_device_present();
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(DYNEMB_WITH_CUDA)
  return table::detail::cuda_devices_visible();
#else
  return 0;
#endif
}

template std::unique_ptr<Table<int64_t>> make_table<int64_t>(Backend, const TableOptions&);
template std::unique_ptr<Table<uint64_t>> make_table<uint64_t>(Backend, const TableOptions&);

}  // namespace dynemb

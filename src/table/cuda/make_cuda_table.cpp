#include "backends.hpp"
#include "cuda/cuda_table.hpp"

namespace dynemb::detail {

template <TableKey K>
std::unique_ptr<Table<K>> make_cuda_table(const TableOptions& options) {
  return std::make_unique<cuda_table::CudaTable<K>>(options);
}

template std::unique_ptr<Table<int64_t>> make_cuda_table<int64_t>(const TableOptions&);
template std::unique_ptr<Table<uint64_t>> make_cuda_table<uint64_t>(const TableOptions&);

}  // namespace dynemb::detail

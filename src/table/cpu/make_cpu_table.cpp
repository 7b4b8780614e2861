#include "backends.hpp"
#include "cpu/cpu_table.hpp"

namespace dynemb::table::detail {

template <TableKey K>
std::unique_ptr<Table<K>> make_cpu_table(const TableOptions& options) {
  return std::make_unique<table::cpu::CpuTable<K>>(options);
}

template std::unique_ptr<Table<int64_t>> make_cpu_table<int64_t>(const TableOptions&);
template std::unique_ptr<Table<uint64_t>> make_cpu_table<uint64_t>(const TableOptions&);

}  // namespace dynemb::table::detail

// include/dynemb/ops/table_keys.hpp on the ops backend given.
#include "dynemb/ops/table_keys.hpp"

namespace dynemb::ops::detail {

template <TableKey K>
void combine_table_keys(const OpsBackend& ops, uint32_t table, uint32_t shift, size_t n,
                        const K* keys, const int64_t* offsets, size_t num_bags, uint64_t base,
                        uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                        uint64_t* status, StreamHandle stream) {
  if (n == 0 && num_bags == 0) return;
  ops.combine_table_keys(table, shift, n, keys, offsets, num_bags, base, bag_base, combined_keys,
                         combined_offsets, status, stream);
}

bool combine_tables_narrow(const OpsBackend& ops, std::span<const TableBatch> tables,
                           uint32_t shift, bool bags, int64_t* combined_offsets, uint64_t* status,
                           StepWorkspace& workspace, StreamHandle stream) {
  if (tables.empty() || tables.size() > kMaxNarrowTables) return false;
  return ops.combine_tables_narrow(tables, shift, bags, combined_offsets, status, workspace,
                                   stream);
}

template <TableKey K>
void split_table_keys(const OpsBackend& ops, size_t u, const uint64_t* unique_keys,
                      uint32_t num_tables, uint32_t shift, K* keys, uint64_t* bounds,
                      StreamHandle stream) {
  ops.split_table_keys(u, unique_keys, num_tables, shift, keys, bounds, stream);
}

void spread_table_keys(const OpsBackend& ops, const TableSpread& spread, StreamHandle stream) {
  ops.spread_table_keys(spread, stream);
}

void gather_table_rows(const OpsBackend& ops, const TableSpread& spread, const TableRows& rows,
                       StreamHandle stream) {
  if (spread.n == 0) return;
  ops.gather_table_rows(spread, rows, stream);
}

template void combine_table_keys<int64_t>(const OpsBackend&, uint32_t, uint32_t, size_t,
                                          const int64_t*, const int64_t*, size_t, uint64_t,
                                          uint64_t, uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void combine_table_keys<uint64_t>(const OpsBackend&, uint32_t, uint32_t, size_t,
                                           const uint64_t*, const int64_t*, size_t, uint64_t,
                                           uint64_t, uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void split_table_keys<int64_t>(const OpsBackend&, size_t, const uint64_t*, uint32_t,
                                        uint32_t, int64_t*, uint64_t*, StreamHandle);
template void split_table_keys<uint64_t>(const OpsBackend&, size_t, const uint64_t*, uint32_t,
                                         uint32_t, uint64_t*, uint64_t*, StreamHandle);

}  // namespace dynemb::ops::detail

// The row split of a WholeMemory.
#include "dynemb/wholememory/partition.hpp"

#include <algorithm>
#include <numeric>

#include "dynemb/core/error.hpp"

namespace dynemb::wholememory {

uint64_t Partition::first_row(uint32_t rank) const {
  return std::min<uint64_t>(static_cast<uint64_t>(rank) * rows_per_rank, rows);
}

uint64_t Partition::rows_of(uint32_t rank) const {
  const uint64_t first = first_row(rank);
  return std::min<uint64_t>(first + rows_per_rank, rows) - first;
}

std::string Partition::describe() const {
  return "rows=" + std::to_string(rows) + ", entry_bytes=" + std::to_string(entry_bytes) +
         ", world=" + std::to_string(world) + ", rows_per_rank=" + std::to_string(rows_per_rank);
}

Partition make_partition(uint64_t total_bytes, uint64_t entry_bytes, uint32_t world,
                         uint64_t granularity) {
  constexpr const char* kWhere = "wholememory::make_partition";
  require(entry_bytes > 0, kWhere, "entry_bytes", std::to_string(entry_bytes), "must be > 0");
  require(world > 0, kWhere, "world", std::to_string(world), "must be > 0");
  require(granularity > 0, kWhere, "granularity", std::to_string(granularity), "must be > 0");
  require(total_bytes > 0, kWhere, "size", std::to_string(total_bytes), "must be > 0");
  require(total_bytes % entry_bytes == 0, kWhere, "size", std::to_string(total_bytes),
          "must be a multiple of entry_bytes = " + std::to_string(entry_bytes));
  Partition p;
  p.rows = total_bytes / entry_bytes;
  p.entry_bytes = entry_bytes;
  p.world = world;
  // Rows per rank: an even share, rounded up to whole granules of rows.
  const uint64_t granule_rows = std::lcm(entry_bytes, granularity) / entry_bytes;
  const uint64_t share = (p.rows + world - 1) / world;
  p.rows_per_rank = (share + granule_rows - 1) / granule_rows * granule_rows;
  return p;
}

}  // namespace dynemb::wholememory

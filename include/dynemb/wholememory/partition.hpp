// How a WholeMemory's rows are split between the ranks: rank r holds the consecutive rows
// [r * rows_per_rank, min((r + 1) * rows_per_rank, rows)) (docs/wholememory.md).
#pragma once

#include <cstdint>
#include <string>

namespace dynemb::wholememory {

// The split of `rows` rows of `entry_bytes` bytes over `world` ranks. Every rank but the last
// ones holds rows_per_rank rows; the tail ranks hold fewer (possibly none).
struct Partition {
  uint64_t rows = 0;
  uint64_t entry_bytes = 0;
  uint32_t world = 0;
  uint64_t rows_per_rank = 0;

  // The first row of rank r's part.
  uint64_t first_row(uint32_t rank) const;
  // Rows of rank r's part.
  uint64_t rows_of(uint32_t rank) const;
  // Bytes of rank r's part.
  uint64_t bytes_of(uint32_t rank) const { return rows_of(rank) * entry_bytes; }
  // Byte offset of rank r's part in the whole memory.
  uint64_t offset_of(uint32_t rank) const { return first_row(rank) * entry_bytes; }
  // The rank holding `row` (row < rows).
  uint32_t owner(uint64_t row) const { return static_cast<uint32_t>(row / rows_per_rank); }
  // Bytes of the whole memory.
  uint64_t total_bytes() const { return rows * entry_bytes; }
  // "rows=..., entry_bytes=..., world=..., rows_per_rank=...".
  std::string describe() const;
};

// Splits `total_bytes` (a multiple of entry_bytes) into rows of `entry_bytes` over `world`
// ranks, each part but the last a whole number of `granularity` bytes (mapped memory needs
// parts of whole pages); throws InvalidArgument naming the argument, its value and the limit.
Partition make_partition(uint64_t total_bytes, uint64_t entry_bytes, uint32_t world,
                         uint64_t granularity = 1);

}  // namespace dynemb::wholememory

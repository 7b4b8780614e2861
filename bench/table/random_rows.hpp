// Kernels' random-row access rate to pinned host memory (the hybrid table's access pattern).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench/table/pcie_floor.hpp"

namespace dynemb::bench {

// Gathers 2^20 random rows of `dim` floats from `region_bytes` of mapped pinned host memory into
// HBM, scatters them back to random rows, and copies random rows to other random rows of the
// region (both directions at once: bytes read + written), visiting the rows in ascending address
// order with tiles of 8 threads per row (float4 accesses when dim % 4 == 0), as the table's
// kernels do for a large call; bytes per second, best of 3 after a warm-up.
// The region should be as large as the table's host-resident rows: in random order the rate
// falls as it grows (dynemb_bench_host_rows, docs/cuda_table.md "Hybrid tables").
// Needs a CUDA build and the current device set.
RandomRowRate measure_random_rows(uint32_t dim, size_t region_bytes);

// Seconds, best of 3 after a warm-up, for a kernel to move n rows of row_bytes bytes from `from`
// to `to` (device addresses; mapped host memory included): row r read at row from_index[r]
// (r when null) and written at row to_index[r] (r when null), threads_per_row threads (8, 16 or
// 32) per row, float4 accesses when row_bytes % 16 == 0. Needs a CUDA build.
double time_row_moves(const void* from, const uint64_t* from_index, void* to,
                      const uint64_t* to_index, uint64_t n, uint32_t row_bytes,
                      uint32_t threads_per_row);

}  // namespace dynemb::bench

// Kernels' random-row access rate to pinned host memory (the hybrid table's access pattern).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench/table/pcie_floor.hpp"

namespace dynemb::bench {

// Gathers 2^19 random rows of `dim` floats (as many as a 2^20-key insert_or_assign writes with
// half its rows in host memory) from `region_bytes` of mapped pinned host memory into HBM,
// scatters them back to random rows, and copies random rows to other random rows of the region
// (both directions at once: bytes read + written); the rows are visited in ascending address
// order, a warp per row with 8-byte words, one warp per row in the grid: the fastest way measured
// (dynemb_bench_host_rows, docs/cuda_table.md "Hybrid tables"). Bytes per second, best of 3 after
// a warm-up. The region should be as large as the table's host-resident rows: the rate falls as
// the rows spread over more pages.
RandomRowRate measure_random_rows(uint32_t dim, size_t region_bytes);

// Seconds, best of 3 after a warm-up, for a kernel to move n rows of row_bytes bytes from `from`
// to `to` (device addresses; mapped host memory included): row r read at row from_index[r]
// (r when null) and written at row to_index[r] (r when null), threads_per_row threads (8, 16 or
// 32) per row and one such tile per row in the grid, with the widest of 16-, 8- and 4-byte words
// that divides the row and still gives every thread a word. Needs a CUDA build.
double time_row_moves(const void* from, const uint64_t* from_index, void* to,
                      const uint64_t* to_index, uint64_t n, uint32_t row_bytes,
                      uint32_t threads_per_row);

}  // namespace dynemb::bench

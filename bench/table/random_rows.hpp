// Kernels' random-row access rate to pinned host memory (the hybrid table's access pattern).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bench/table/pcie_floor.hpp"

namespace dynemb::bench {

// Gathers 2^20 random rows of `dim` floats from `region_bytes` of mapped pinned host memory into
// HBM, and scatters them back to random rows, with tiles of 8 threads per row (float4 accesses
// when dim % 4 == 0), as the table's kernels do; bytes per second, best of 3 after a warm-up.
// The region should be as large as the table's host-resident rows: the rate falls as it grows
// (measured on the H100 VM: 27 GB/s over 1 GiB, 7.8 GB/s over 16 GiB, rows of 256 bytes).
// Needs a CUDA build and the current device set.
RandomRowRate measure_random_rows(uint32_t dim, size_t region_bytes);

}  // namespace dynemb::bench

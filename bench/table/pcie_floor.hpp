// The PCIe floor of a hybrid-mode call: the value bytes that must cross PCIe (rows stored in
// pinned host memory, read or written by the kernels) over the bandwidth measured in the run.
#pragma once

#include <cstdint>
#include <optional>

#include "bench/table/table_op.hpp"

namespace dynemb::bench {

// Copy-engine bandwidth between pinned host memory and the GPU, bytes per second.
struct PcieBandwidth {
  double host_to_device = 0.0;
  double device_to_host = 0.0;
};

// Measures it with 1 GiB cudaMemcpyAsync transfers on `device` (best of 3 per direction);
// nullopt without a CUDA backend or device.
std::optional<PcieBandwidth> measure_pcie_bandwidth(int device);

// The share of a hybrid table's slots whose rows live in host memory: rows past
// floor(hbm_bytes / (dim * 4)), of `capacity` slots (0 when everything fits in HBM).
double host_row_share(uint64_t capacity, uint32_t dim, double hbm_bytes);

// Value bytes one call of `op` on `batch` keys (60% present, 40% new) moves over PCIe in each
// direction, with `host_share` of the slots in host memory.
struct PcieBytes {
  double read = 0.0;     // host rows the kernels read (host to device)
  double written = 0.0;  // host rows the kernels write (device to host)
};
PcieBytes pcie_bytes(TableOp op, uint64_t batch, uint32_t dim, double host_share);

// The floor in seconds: PCIe is full duplex, so the slower direction bounds the call.
double pcie_floor_seconds(const PcieBytes& bytes, const PcieBandwidth& bandwidth);

}  // namespace dynemb::bench

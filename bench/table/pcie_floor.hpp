// The PCIe floor of a hybrid-mode call: the value bytes that must cross PCIe (rows stored in
// pinned host memory, read or written by the kernels) over the bandwidth measured in the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "bench/table/table_op.hpp"

namespace dynemb::bench {

// What a kernel moves when it reads (gathers) or writes (scatters) rows at random positions of
// pinned host memory, the way a hybrid table reaches its host-resident rows; bytes per second.
struct RandomRowRate {
  double read = 0.0;
  double write = 0.0;
  // Bytes read plus bytes written per second when one kernel does both at once (random rows
  // copied to other random rows of the same region); 0: not measured.
  double both = 0.0;
};

// Bandwidth between pinned host memory and the GPU, bytes per second: the copy engine's bulk
// transfers, and kernels' random-row accesses per dim (the link serves small random reads far
// slower than a bulk copy on some hosts).
struct PcieBandwidth {
  double host_to_device = 0.0;
  double device_to_host = 0.0;
  std::map<uint32_t, RandomRowRate> random_rows;  // by dim (rows of dim floats)
};

// Measures it on `device`: 1 GiB cudaMemcpyAsync transfers (best of 3 per direction) and, for
// each (dim, bytes) of `host_regions`, 2^20 random rows of dim floats gathered from and
// scattered to that many bytes of mapped pinned memory (measure_random_rows); nullopt without
// a CUDA backend or device.
std::optional<PcieBandwidth> measure_pcie_bandwidth(int device,
                                                    const std::map<uint32_t, size_t>& host_regions);

// The share of a hybrid table's slots whose rows live in host memory: rows past
// floor(hbm_bytes / (dim * 4)), of `capacity` slots (0 when everything fits in HBM).
double host_row_share(uint64_t capacity, uint32_t dim, double hbm_bytes);

// Value bytes one call of `op` on `batch` keys (60% present, 40% new) moves over PCIe in each
// direction, with `host_share` of the slots in host memory, in a table filled to `load_factor`
// (at 1, insert_and_evict reads each new key's victim row before writing over it).
struct PcieBytes {
  double read = 0.0;     // host rows the kernels read (host to device)
  double written = 0.0;  // host rows the kernels write (device to host)
  double touched = 0.0;  // host rows read, written or both, each row once
};
PcieBytes pcie_bytes(TableOp op, uint64_t batch, uint32_t dim, double host_share,
                     double load_factor);

// The floor in seconds: PCIe is full duplex, so the slower direction bounds the call.
double pcie_floor_seconds(const PcieBytes& bytes, const PcieBandwidth& bandwidth);

// The same bytes at the random-row rates measured for `dim`: the slower direction; for a call
// that both reads and writes host rows, at least its touched rows at the rate of both at once
// (nullopt when not measured).
std::optional<double> random_row_floor_seconds(const PcieBytes& bytes,
                                               const PcieBandwidth& bandwidth, uint32_t dim);

}  // namespace dynemb::bench

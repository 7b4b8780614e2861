// A table's load factor as its writes last left it, known on the host without a synchronization:
// once the writes since the last count could have moved the load factor by 1/kCountsPerFill, the
// stored keys are counted on the device and the count copied to pinned memory; the host uses the
// newest count whose copy has completed. Kernels whose best shape depends on how full the table
// is pick it by this figure (docs/cuda_table.md, "Tiles of 4 threads"); a stale figure costs speed,
// never a result.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "table/cuda/device_layout.hpp"

namespace dynemb::cuda_table {

class LoadFactorProbe {
 public:
  LoadFactorProbe();
  ~LoadFactorProbe();
  LoadFactorProbe(const LoadFactorProbe&) = delete;
  LoadFactorProbe& operator=(const LoadFactorProbe&) = delete;

  // After a write of `keys` keys to `table` on `stream` (under the table's writer lock): counts
  // the stored keys on `stream` when none was counted yet or the keys written since the last
  // count reach capacity / kCountsPerFill, unless a count is still being copied.
  void after_write(const TableView& table, uint64_t keys, cudaStream_t stream);
  // The newest completed count over `capacity`; 0 before any count has completed.
  double load_factor(uint64_t capacity);

  // Counts per capacity's worth of written keys: the figure lags by at most about this fraction.
  static constexpr uint64_t kCountsPerFill = 32;

 private:
  // Takes the count in flight once its copy has completed.
  void collect();

  CallState* state_ = nullptr;                // device: the count kernel's output
  unsigned long long* host_count_ = nullptr;  // pinned
  cudaEvent_t copied_ = nullptr;
  bool in_flight_ = false;
  bool counted_ = false;
  uint64_t known_count_ = 0;
  uint64_t written_since_count_ = 0;
};

}  // namespace dynemb::cuda_table

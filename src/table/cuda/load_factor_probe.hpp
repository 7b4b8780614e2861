// A bound on a table's load factor, known on the host without a synchronization: once the keys
// written since the last count reach capacity / kCountsPerFill, the stored keys are counted on the
// device and the count copied to pinned memory. The bound is the newest completed count plus every
// key written since, as though each were new: when the host runs ahead of the device (no count
// completes for many calls) it still rises with the writes. Kernels whose best shape depends on
// how full the table is pick it by this figure (docs/cuda_table.md, "Tiles of 4 threads"); a
// wrong figure costs speed, never a result.
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
  // An upper bound of the load factor at `capacity` now: upper_bound over the newest completed
  // count and the keys written since it (erasures since the count are not seen).
  double load_factor_bound(uint64_t capacity);

  // (count + keys written since it) / capacity, at most 1; 1 for a capacity of 0.
  static double upper_bound(uint64_t count, uint64_t written_since, uint64_t capacity);

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
  uint64_t known_count_ = 0;       // the newest completed count
  uint64_t written_ = 0;           // keys written through after_write, all told
  uint64_t written_at_known_ = 0;  // written_ when the known count was issued
  uint64_t written_at_issue_ = 0;  // written_ when the newest count was issued
};

}  // namespace dynemb::cuda_table

// The figures one `dynemb bench table` run produces.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/table/bench_clock.hpp"
#include "bench/table/config.hpp"
#include "bench/table/hkv_run.hpp"
#include "bench/table/pcie_floor.hpp"
#include "bench/table/table_op.hpp"
#include "dynemb/core/stats.hpp"

namespace dynemb::bench {

// 2^30 key-value pairs per second: HKV's unit.
inline constexpr double kBillionKv = 1073741824.0;
// 2^20 key-value pairs per second.
inline constexpr double kMillionKv = 1048576.0;

// The best time of one operation and the pairs it handled (export: slots walked).
struct OpTiming {
  double seconds = 0.0;
  uint64_t pairs = 0;
  // CPU seconds the whole process used during the call: cpu_seconds / seconds well below the
  // thread count means other load took the cores (CPU backend; on CUDA the host's share).
  double cpu_seconds = 0.0;
  // Throughput in B-KV/s (2^30 pairs per second).
  double b_kv_s() const { return seconds > 0 ? double(pairs) / seconds / kBillionKv : 0.0; }
  // Throughput in M-KV/s (2^20 pairs per second).
  double m_kv_s() const { return seconds > 0 ? double(pairs) / seconds / kMillionKv : 0.0; }
};

// Best timings per operation of one table implementation.
using OpTimings = std::map<TableOp, OpTiming>;

// Everything measured at one (dim, load factor).
struct ScenarioResult {
  uint32_t dim = 0;
  uint64_t capacity = 0;
  double load_factor = 0.0;         // requested
  uint64_t stored_keys = 0;         // keys stored at the start of every timed call
  uint64_t fill_keys_inserted = 0;  // fresh keys inserted to reach the load factor (once)
  OpTimings dynemb;
  std::map<std::string, OpTimings> peers;  // "libcuckoo", "absl_flat_hash_map"
  TableStats dynemb_stats;                 // the dynemb table's counters at the end
  std::vector<std::string> notes;
};

// The machine a run was taken on.
struct MachineInfo {
  std::string hostname;
  std::string cpu_model;
  uint32_t cores = 0;
  uint64_t memory_bytes = 0;
};

// One complete run: parameters, provenance and every figure.
struct TableBenchReport {
  TableBenchConfig config;
  uint32_t threads = 0;
  MachineInfo machine;
  std::optional<GpuInfo> gpu;
  // Hybrid runs (values past the HBM budget in pinned host memory): the PCIe bandwidth
  // measured at the start, for each call's PCIe floor.
  std::optional<PcieBandwidth> pcie;
  std::string git_commit;
  std::string date_utc;  // ISO 8601, e.g. 2025-01-31T12:00:00Z
  // /proc/loadavg (1, 5, 15 min) when the run started and ended: other load skews CPU figures.
  std::vector<double> load_average_start, load_average_end;
  std::vector<ScenarioResult> scenarios;
  // HKV measured in the same device call (config.hkv_outputs), read before the run.
  std::vector<HkvRun> hkv_runs;
};

}  // namespace dynemb::bench

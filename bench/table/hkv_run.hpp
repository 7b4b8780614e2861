// HKV's benchmark output from the same device call (`hkv_benchmark hbm|hybrid DIM CAP_M HBM_GB`,
// HKV's own merlin_hashtable_benchmark behind a driver), read so that a CUDA run's ratios stand on
// a peer measured beside it rather than on the H100 anchors (`--hkv-output`).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/table/table_op.hpp"

namespace dynemb::bench {

// One HKV benchmark output: its header and every B-KV/s figure it printed.
struct HkvRun {
  std::string path;
  std::string gpu;   // the device HKV names in its header
  std::string mode;  // "hbm" or "hybrid"
  uint32_t dim = 0;
  uint64_t capacity = 0;  // slots
  double hbm_gb = 0.0;    // GB of values in HBM
  // Load factor as printed ("0.50") -> HKV's column name ("find_or_insert*") -> B-KV/s.
  std::map<std::string, std::map<std::string, double>> figures;
};

// Parses HKV benchmark output text (`path` names it in errors and in the result). Throws
// InvalidArgument naming the file when it has no HKV header or no figure.
HkvRun parse_hkv_run(const std::string& text, const std::string& path);

// Reads and parses each file; throws InvalidArgument naming a file that cannot be read.
std::vector<HkvRun> read_hkv_runs(const std::vector<std::string>& paths);

// HKV's column for `op` (find_or_insert* for both pointer ops: it reserves slots and writes no
// row; find_or_insert for find_or_insert_given too), or "" where HKV has none.
std::string hkv_column(TableOp op);

// HKV's B-KV/s for `op` in a run of this dim, capacity, load factor and mode (pure HBM when no
// budget or a budget holding every value; hybrid with the same HBM budget in GB).
std::optional<double> hkv_same_run(const std::vector<HkvRun>& runs, uint32_t dim, uint64_t capacity,
                                   double load_factor, TableOp op,
                                   std::optional<double> hbm_budget_gb);

}  // namespace dynemb::bench

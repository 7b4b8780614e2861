// Every parameter of `dynemb bench table`, its defaults and its limits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/table/table_op.hpp"
#include "dynemb/core/options.hpp"

namespace dynemb::bench {

// The fraction of a timed batch whose keys are already stored (the rest are new), as HKV.
inline constexpr double kPresentFraction = 0.6;
// Slots per bucket of the benchmarked tables (the contract's default).
inline constexpr uint32_t kBenchBucketCapacity = 128;

// What one `dynemb bench table` run measures.
struct TableBenchConfig {
  Backend backend = Backend::kCpu;
  std::vector<uint32_t> dims{8, 32, 64};
  std::vector<double> load_factors{0.5, 0.75, 1.0};
  std::optional<uint64_t> capacity;     // slots; unset = default_capacity(backend, dim)
  uint64_t batch = uint64_t{1} << 20;   // keys per timed call
  uint32_t repeats = 2;                 // timed runs per cell; the best is kept
  uint32_t threads = 0;                 // CPU worker threads (0 = all hardware threads)
  std::optional<double> hbm_budget_gb;  // CUDA hybrid mode: GiB of values kept in HBM
  // CUDA: writing calls of at least this many keys are grouped by bucket (TableOptions).
  uint64_t grouped_write_min_batch = TableOptions{}.grouped_write_min_batch;
  // CUDA hybrid mode: keys a large write keeps in flight (TableOptions).
  uint32_t host_keys_in_flight = TableOptions{}.host_keys_in_flight;
  // CUDA: copies of a key meeting at a taken bucket lock take the claimer's result (TableOptions).
  bool join_contended_copies = TableOptions{}.join_contended_copies;
  // CUDA: writes of at least this many keys run once per distinct key (TableOptions; unset: the
  // table's default).
  std::optional<uint64_t> coalesce_copies_min_batch = TableOptions{}.coalesce_copies_min_batch;
  std::vector<TableOp> ops = all_table_ops();
  bool peers = true;          // CPU: also time libcuckoo and absl::flat_hash_map
  bool pcie_floor = true;     // CUDA hybrid mode: measure the PCIe and random-row floors
  uint64_t seed = 0;          // key stream seed
  std::string json_path;      // empty = default_json_path(...)
  std::string markdown_path;  // empty = no markdown file
  // CUDA: HKV benchmark outputs of the same device call, the peer where they have the cell
  // (bench/table/hkv_run.hpp); the H100 anchors elsewhere.
  std::vector<std::string> hkv_outputs;
  bool quick = false;  // smoke-test size (quick_table_bench_config)
};

// The defaults of --quick: a small capacity and batch, one dim, every load factor.
TableBenchConfig quick_table_bench_config();

// Capacity (slots) used for `dim`: the --capacity option, else 2^23 on CPU and, on CUDA, 128M
// for dims <= 32 and 64M for dim 64 (ANCHORS.md), shrinking with larger dims.
uint64_t table_capacity(const TableBenchConfig& config, uint32_t dim);

// Worker threads actually used (threads, or the hardware count when threads == 0).
uint32_t effective_threads(const TableBenchConfig& config);

// Throws InvalidArgument naming the first bad option (as spelled on the command line), its
// value and its limit; NotAvailable when --backend cuda is not built in or has no device.
void validate(const TableBenchConfig& config);

}  // namespace dynemb::bench

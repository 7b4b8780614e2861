// `dynemb bench dedup`: the training step's dedup (include/dynemb/ops/step_ops.hpp, dedup_grouped)
// on the step's shapes, one table at a time, the tables side by side, and all tables in one call.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bench/table/bench_clock.hpp"
#include "bench/table/results.hpp"
#include "dynemb/core/options.hpp"

namespace dynemb::bench {

struct DedupBenchConfig {
  Backend backend = Backend::kCpu;
  uint32_t tables = 10;
  uint64_t rows_per_table = uint64_t{1} << 20;  // ids a table's Zipf draws from
  uint64_t batch = 65536;                       // bags per table
  uint32_t ids_per_bag = 20;
  double zipf_alpha = 1.05;
  uint32_t warmup = 3;
  uint32_t repeats = 10;
  uint64_t seed = 0;  // 0: random
  std::string json_path;
};

// One way of deduplicating a step's keys, timed.
struct DedupScenario {
  std::string name;
  uint64_t calls = 0;  // dedup calls per repeat
  uint64_t keys_per_call = 0;
  uint64_t unique_keys = 0;     // summed over the calls
  double seconds_median = 0.0;  // of one repeat (every call)
  double seconds_min = 0.0;
};

struct DedupBenchReport {
  DedupBenchConfig config;
  MachineInfo machine;
  std::optional<GpuInfo> gpu;
  std::string git_commit, date_utc;
  std::vector<DedupScenario> scenarios;
};

// Throws InvalidArgument naming the option when `c` is out of range.
void validate_dedup_bench_config(const DedupBenchConfig& c);

// Runs every scenario; checks that they find the same unique keys (throws Error otherwise).
DedupBenchReport run_dedup_bench(const DedupBenchConfig& c, std::ostream& progress);

// Prints the table and writes the JSON (c.json_path or bench/results/dedup-...json); returns
// the path written.
std::string report_dedup_bench(const DedupBenchReport& r, std::ostream& out);

}  // namespace dynemb::bench

// `dynemb bench train`: one training step (forward SUM pooling, backward, fused optimizer) over
// several dynamic tables, with a per-stage breakdown and the memory-traffic floor of each stage.
#pragma once

#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/table/bench_clock.hpp"
#include "bench/table/results.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/value_type.hpp"
#include "dynemb/ops/optimizer.hpp"

namespace dynemb::bench {

// Every parameter of one run.
struct TrainBenchConfig {
  Backend backend = Backend::kCpu;
  uint32_t tables = 10;
  uint64_t rows_per_table = 1 << 20;  // ids drawn per table (Zipf over this many)
  uint32_t dim = 128;
  uint64_t batch = 65536;  // bags per table per step
  uint32_t ids_per_bag = 20;
  double zipf_alpha = 1.05;
  OptimizerKind optimizer = OptimizerKind::kAdam;
  uint32_t warmup_steps = 3;
  uint32_t steps = 10;
  uint32_t threads = 0;  // CPU table threads (0 = all)
  // The tables' steps run side by side: one host thread and (CUDA) one stream per table. Off:
  // one table after the other on one stream. Stage profiling stays one table at a time.
  bool concurrent_tables = false;
  // One EmbeddingCollection over every table on one stream (one dedup, pooling and backward
  // launch for all tables) instead of one Embedding per table; ids carry no table tag.
  bool grouped_tables = false;
  // Grouped tables: the collection's host-sync-free step (EmbeddingCollection::
  // set_host_sync_free); off: the step that reads its counts on the host.
  bool host_sync_free = true;
  // Host-sync-free grouped tables: side streams the tables' lookups run on (1: the one stream).
  uint32_t lookup_streams = 8;
  // Grouped tables on CUDA: after the eager timed steps, one training step (and one forward) is
  // captured into a CUDA graph and replayed for the same number of timed steps.
  bool graph = false;
  // What the embeddings' rows are stored as; the optimizer state is float32 unless
  // state_in_value_type (16-bit types: the state in the rows' type, rounded stochastically).
  ValueType value_type = ValueType::kFloat32;
  bool state_in_value_type = false;
  // What the pooled outputs and their gradients are: float32, or the rows' 16-bit type
  // (EmbeddingOptions::output_type).
  ValueType output_type = ValueType::kFloat32;
  // false: the opt-in backward that sums rows' gradients with float atomics in any order
  // (EmbeddingOptions::deterministic_backward).
  bool deterministic_backward = true;
  uint64_t seed = 0;  // 0 = random
  std::string json_path;
};

// The 13.1M-lookup shape of ANCHORS.md and the 1M-lookup variant.
// Throws InvalidArgument naming the option (for `where`) when the shape shared by `dynemb bench
// train` and `dynemb bench dedup` is out of range: --tables, --rows, --batch, --ids-per-bag,
// --alpha.
void validate_step_shape(const char* where, uint32_t tables, uint64_t rows, uint64_t batch,
                         uint32_t ids_per_bag, double alpha);

TrainBenchConfig train_bench_config_13m();
TrainBenchConfig train_bench_config_1m();
// Throws InvalidArgument naming the bad field.
void validate_train_bench_config(const TrainBenchConfig& config);

struct TrainBenchReport {
  TrainBenchConfig config;
  MachineInfo machine;
  std::optional<GpuInfo> gpu;
  std::string git_commit;
  std::string date_utc;
  double copy_bandwidth = 0.0;  // bytes (read + written) per second, measured in this run
  uint64_t lookups_per_step = 0;
  double unique_per_step = 0.0;  // distinct keys per step, summed over tables
  // Median over the timed steps, no profiling syncs (concurrent tables: host wall clock from the
  // first table's start to the last table's stream done; else CUDA events on the one stream).
  double step_seconds = 0.0;
  double forward_seconds = 0.0;  // median forward-only time (no backward)
  // --graph: medians of the replayed step and forward graphs (CUDA events on the one stream), and
  // the step graph's nodes.
  double graph_step_seconds = 0.0, graph_forward_seconds = 0.0;
  size_t graph_nodes = 0;
  std::string graph_error;  // what stopped the capture or a replay (empty: none)
  // Median seconds per stage over profiled steps (a sync after each stage), summed over tables.
  std::map<std::string, double> stage_seconds;
  // Bytes that must move (forward: keys, unique embedding rows read, pooled output written;
  // update: gradient read, unique rows with optimizer state read and written) and the time
  // they take at the measured copy bandwidth.
  double forward_floor_bytes = 0.0, step_floor_bytes = 0.0;
  double forward_floor_seconds = 0.0, step_floor_seconds = 0.0;
  uint64_t rows_after = 0;
  uint32_t row_dim = 0;  // floats per table row (embedding, optimizer state, padding)
};

// Runs warm-up and timed steps; progress lines go to `progress`.
TrainBenchReport run_train_bench(const TrainBenchConfig& config, std::ostream& progress);

// Prints the report as a table and writes its JSON (config.json_path or
// bench/results/train-<backend>-<lookups>k[-grouped]-<machine>.json); returns the path written.
std::string report_train_bench(const TrainBenchReport& report, std::ostream& out);

}  // namespace dynemb::bench

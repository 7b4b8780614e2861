// `dynemb bench train`: one training step over several dynamic tables, with its floor.
#include <iostream>
#include <memory>
#include <string>

#include "bench/train/train_bench.hpp"
#include "cli_checks.hpp"
#include "command_registry.hpp"
#include "dynemb/core/error.hpp"

namespace {

struct BenchTrainArgs {
  std::string backend = "cpu";
  std::string shape = "13m";
  std::string optimizer = "adam";
  uint32_t tables = 0, dim = 0, ids_per_bag = 0, steps = 0, threads = 0;
  int64_t warmup = -1;  // -1: the shape's default
  uint64_t rows = 0, batch = 0, seed = 0;
  double alpha = 0.0;
  bool concurrent_tables = false, sequential_tables = false, grouped_tables = false;
  bool host_sync = false, graph = false;
  uint32_t lookup_streams = 8;
  std::string value_type = "fp32";
  bool state_in_value_type = false;
  std::string output_type = "fp32";
  bool unordered_backward = false;
  std::string json_path;
};

dynemb::bench::TrainBenchConfig make_config(const BenchTrainArgs& a) {
  using namespace dynemb;
  if (a.shape != "13m" && a.shape != "1m") {
    throw InvalidArgument("bench train: --shape = \"" + a.shape + "\", must be 13m or 1m");
  }
  bench::TrainBenchConfig c =
      a.shape == "13m" ? bench::train_bench_config_13m() : bench::train_bench_config_1m();
  c.backend = parse_backend(a.backend);
  c.optimizer = parse_optimizer(a.optimizer);
  if (a.tables) c.tables = a.tables;
  if (a.dim) c.dim = a.dim;
  if (a.ids_per_bag) c.ids_per_bag = a.ids_per_bag;
  if (a.steps) c.steps = a.steps;
  if (a.warmup >= 0) c.warmup_steps = static_cast<uint32_t>(a.warmup);
  if (a.rows) c.rows_per_table = a.rows;
  if (a.batch) c.batch = a.batch;
  if (a.alpha > 0) c.zipf_alpha = a.alpha;
  c.threads = a.threads;
  // Tables side by side: by default on cuda (one stream and host thread per table).
  c.grouped_tables = a.grouped_tables;
  c.host_sync_free = !a.host_sync;
  c.lookup_streams = a.lookup_streams;
  c.graph = a.graph;
  c.value_type = parse_value_type(a.value_type, "bench train", "--value-type");
  if (a.state_in_value_type && c.value_type != ValueType::kBFloat16) {
    throw InvalidArgument("bench train: --state-in-value-type needs --value-type bf16 (is " +
                          a.value_type + ")");
  }
  c.state_in_value_type = a.state_in_value_type;
  c.output_type = parse_value_type(a.output_type, "bench train", "--output-type");
  if (c.output_type != ValueType::kFloat32 && c.output_type != c.value_type) {
    throw InvalidArgument("bench train: --output-type = \"" + a.output_type +
                          "\", must be fp32 or the --value-type (" + a.value_type + ")");
  }
  c.deterministic_backward = !a.unordered_backward;
  c.concurrent_tables = a.concurrent_tables ||
                        (!a.sequential_tables && !a.grouped_tables && c.backend == Backend::kCuda);
  c.seed = a.seed;
  c.json_path = a.json_path;
  return c;
}

void install(CLI::App& cmd) {
  auto a = std::make_shared<BenchTrainArgs>();
  cmd.footer(
      "Times training steps (forward SUM pooling, backward, fused optimizer) over several "
      "dynamic tables with Zipf ids, prints a per-stage breakdown beside the memory-traffic "
      "floor (bytes that must move / copy bandwidth measured in the same run) and writes JSON "
      "under bench/results/. Shapes: 13m = 10 tables x dim 128, batch 65,536 x 20 ids "
      "(13.1M lookups); 1m = batch 5,120 (1.02M lookups).");
  cmd.add_option("--backend", a->backend, "cpu or cuda")->capture_default_str();
  cmd.add_option("--shape", a->shape, "13m or 1m")->capture_default_str();
  cmd.add_option("--optimizer", a->optimizer, "sgd, adam, adagrad, rowwise_adagrad, rmsprop, ftrl")
      ->capture_default_str();
  // Leaving an option out gives its default; a value given must be in range (0 is not a
  // silent "default").
  using dynemb::tools::finite_in;
  using dynemb::tools::unsigned_in;
  cmd.add_option("--tables", a->tables, "tables (default 10)")->check(unsigned_in(1, 4096));
  cmd.add_option("--rows", a->rows, "ids per table the Zipf draws from (default 1,048,576)")
      ->check(unsigned_in(1, uint64_t{1} << 40));
  cmd.add_option("--dim", a->dim, "embedding dim (default 128)")->check(unsigned_in(1, 4096));
  cmd.add_option("--batch", a->batch, "bags per table per step")
      ->check(unsigned_in(1, uint64_t{1} << 26));
  cmd.add_option("--ids-per-bag", a->ids_per_bag, "ids per bag (default 20)")
      ->check(unsigned_in(1, 1u << 16));
  cmd.add_option("--alpha", a->alpha, "Zipf exponent (default 1.05)")->check(finite_in(0.01, 10.0));
  cmd.add_option("--steps", a->steps, "timed steps (default 10)")->check(unsigned_in(1, 1u << 20));
  cmd.add_option("--warmup", a->warmup, "warm-up steps (default 3)")
      ->check(unsigned_in(0, 1u << 20));
  cmd.add_option("--threads", a->threads, "CPU table threads (0 = all)")
      ->check(unsigned_in(0, 1024));
  cmd.add_option("--seed", a->seed, "random seed (0 = random)")
      ->check(dynemb::tools::fits(a->seed));
  cmd.add_flag("--concurrent-tables", a->concurrent_tables,
               "run the tables' steps side by side, one stream and host thread each (default "
               "for cuda)");
  cmd.add_flag("--sequential-tables", a->sequential_tables,
               "run the tables one after the other on one stream (default for cpu)");
  cmd.add_flag("--grouped-tables", a->grouped_tables,
               "one EmbeddingCollection over every table, on one stream (one dedup, pooling and "
               "backward launch for all tables)");
  cmd.add_flag("--host-sync", a->host_sync,
               "with --grouped-tables: the collection's step that reads its counts on the host "
               "(default: the host-sync-free step)");
  cmd.add_option("--lookup-streams", a->lookup_streams,
                 "host-sync-free grouped tables: side streams for the tables' lookups (1 = none)")
      ->check(unsigned_in(1, 64))
      ->capture_default_str();
  cmd.add_flag("--graph", a->graph,
               "with --grouped-tables on cuda: also capture one step and one forward into CUDA "
               "graphs and time their replays");
  cmd.add_option("--value-type", a->value_type, "rows stored as fp32, fp16 or bf16")
      ->capture_default_str();
  cmd.add_flag("--state-in-value-type", a->state_in_value_type,
               "with --value-type bf16: keep the optimizer state in bfloat16 too (rounded "
               "stochastically) instead of float32");
  cmd.add_option("--output-type", a->output_type,
                 "pooled outputs and their gradients as fp32, or as the --value-type (fp16 or "
                 "bf16: sums in float32, rounded once when written)")
      ->capture_default_str();
  cmd.add_flag("--unordered-backward", a->unordered_backward,
               "the opt-in non-deterministic backward (float atomics, rows' sums in any order; "
               "EmbeddingOptions::deterministic_backward = false)");
  cmd.add_option("--json", a->json_path, "result file (default bench/results/train-...json)");
  cmd.callback([a] {
    const auto config = make_config(*a);
    const auto report = dynemb::bench::run_train_bench(config, std::cerr);
    dynemb::bench::report_train_bench(report, std::cout);
  });
}

const bool registered = dynemb::tools::register_command(
    {{"bench", "train"}, "time a training step (forward, backward, optimizer)", install});

}  // namespace

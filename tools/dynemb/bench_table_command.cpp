// `dynemb bench table`: HKV's hash-table benchmark on dynemb's table and its CPU peers.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/table/table_bench.hpp"
#include "cli_checks.hpp"
#include "command_registry.hpp"

namespace {

using dynemb::bench::TableBenchConfig;

// The raw command line; an option left out keeps the default (of --quick, if given).
struct BenchTableArgs {
  std::string backend = "cpu";
  std::vector<uint32_t> dims;
  std::vector<double> load_factors;
  uint64_t capacity = 0;
  uint64_t batch = 0;
  uint32_t repeats = 0;
  uint32_t threads = 0;
  double hbm_budget_gb = 0;
  uint64_t grouped_write_min_batch = 0;
  uint32_t host_keys_in_flight = 0;
  uint64_t coalesce_copies_min_batch = 0;
  std::vector<std::string> ops;
  bool no_peers = false;
  bool no_pcie_floor = false;
  bool join_copies = false;
  uint64_t seed = 0;
  std::string json_path;
  std::string markdown_path;
  std::vector<std::string> hkv_outputs;
  bool quick = false;
};

// Options given on the command line, by the field they set.
struct GivenOptions {
  CLI::Option* dims = nullptr;
  CLI::Option* load_factors = nullptr;
  CLI::Option* capacity = nullptr;
  CLI::Option* batch = nullptr;
  CLI::Option* repeats = nullptr;
  CLI::Option* threads = nullptr;
  CLI::Option* hbm_budget_gb = nullptr;
  CLI::Option* grouped_write_min_batch = nullptr;
  CLI::Option* host_keys_in_flight = nullptr;
  CLI::Option* coalesce_copies_min_batch = nullptr;
  CLI::Option* ops = nullptr;
};

TableBenchConfig make_config(const BenchTableArgs& a, const GivenOptions& given) {
  TableBenchConfig c = a.quick ? dynemb::bench::quick_table_bench_config() : TableBenchConfig{};
  c.backend = dynemb::parse_backend(a.backend);
  if (given.dims->count() > 0) c.dims = a.dims;
  if (given.load_factors->count() > 0) c.load_factors = a.load_factors;
  if (given.capacity->count() > 0) c.capacity = a.capacity;
  if (given.batch->count() > 0) c.batch = a.batch;
  if (given.repeats->count() > 0) c.repeats = a.repeats;
  if (given.threads->count() > 0) c.threads = a.threads;
  if (given.hbm_budget_gb->count() > 0) c.hbm_budget_gb = a.hbm_budget_gb;
  if (given.grouped_write_min_batch->count() > 0)
    c.grouped_write_min_batch = a.grouped_write_min_batch;
  if (given.host_keys_in_flight->count() > 0) c.host_keys_in_flight = a.host_keys_in_flight;
  if (given.coalesce_copies_min_batch->count() > 0)
    c.coalesce_copies_min_batch = a.coalesce_copies_min_batch;
  if (given.ops->count() > 0) {
    c.ops.clear();
    for (const std::string& name : a.ops) c.ops.push_back(dynemb::bench::parse_op(name, "--ops"));
  }
  c.peers = !a.no_peers;
  c.pcie_floor = !a.no_pcie_floor;
  c.join_contended_copies = a.join_copies;
  c.seed = a.seed;
  c.json_path = a.json_path;
  c.markdown_path = a.markdown_path;
  c.hkv_outputs = a.hkv_outputs;
  return c;
}

void install(CLI::App& cmd) {
  auto args = std::make_shared<BenchTableArgs>();
  auto given = std::make_shared<GivenOptions>();
  cmd.footer(
      "Fills a fixed-capacity table (uint64 keys, float32 rows, TIMESTAMP scores) with random keys "
      "to each load factor, then times one call per operation on a batch whose keys are 60% "
      "present and 40% new (best of --repeats), restoring the table before every call. On cpu, "
      "libcuckoo and absl::flat_hash_map are timed on the same keys. Prints tables in HKV's "
      "layout (B-KV/s = 2^30 KV/s) and writes JSON under bench/results/.\n");
  cmd.add_option("--backend", args->backend, "Table backend: cpu or cuda (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  given->dims = cmd.add_option("--dims", args->dims,
                               "Value dims, comma-separated (default 8,32,64; --quick: 32)")
                    ->delimiter(',');
  given->load_factors =
      cmd.add_option("--load-factors", args->load_factors,
                     "Load factors in (0, 1], comma-separated (default 0.5,0.75,1.0)")
          ->delimiter(',');
  given->capacity =
      cmd.add_option("--capacity", args->capacity,
                     "Slots per table, a multiple of 128 (default: cpu 2^23; cuda 2^27 "
                     "for dim <= 32, 2^26 for dim 64; --quick: 2^16)");
  given->batch = cmd.add_option("--batch", args->batch,
                                "Keys per timed call (default 1048576; --quick: 16384)");
  given->repeats =
      cmd.add_option("--repeats", args->repeats, "Timed calls per cell, best kept (default 2)");
  given->threads = cmd.add_option(
      "--threads", args->threads,
      "cpu: worker threads of dynemb and libcuckoo (default 0 = all hardware threads)");
  given->hbm_budget_gb = cmd.add_option(
      "--hbm-budget-gb", args->hbm_budget_gb,
      "cuda: GiB of values kept in HBM, the rest in pinned host memory (hybrid mode)");
  given->grouped_write_min_batch = cmd.add_option(
      "--grouped-write-min-batch", args->grouped_write_min_batch,
      "cuda: writing calls of at least this many keys are sorted by bucket and written without "
      "bucket locks (default: never; 0 = every call)");
  given->host_keys_in_flight = cmd.add_option(
      "--host-keys-in-flight", args->host_keys_in_flight,
      "cuda hybrid mode: keys a large write keeps in flight at once (default " +
          std::to_string(dynemb::TableOptions{}.host_keys_in_flight) + "; 0 = no cap)");
  given->coalesce_copies_min_batch = cmd.add_option(
      "--coalesce-copies-min-batch", args->coalesce_copies_min_batch,
      "cuda: writes of at least this many keys run once per distinct key, the copies taking its "
      "result (TableOptions::coalesce_copies_min_batch; default: the table's own choice)");
  given->ops =
      cmd.add_option(
             "--ops", args->ops,
             "Operations, comma-separated (default all: " + dynemb::bench::op_names_list() + ")")
          ->delimiter(',');
  cmd.add_flag("--no-peers", args->no_peers, "cpu: skip libcuckoo and absl::flat_hash_map");
  cmd.add_flag("--no-pcie-floor", args->no_pcie_floor,
               "cuda hybrid mode: skip measuring the PCIe and random-row floors (quicker A/B runs; "
               "the over-floor tables are left out)");
  cmd.add_flag("--join-copies", args->join_copies,
               "cuda: copies of a key that meet at a taken bucket lock join the copy holding it "
               "(TableOptions::join_contended_copies on), to measure what the joins cost a batch");
  CLI::Option* seed = cmd.add_option("--seed", args->seed,
                                     "Key stream seed (default 0 = random; the JSON records it)");
  // Unsigned options: a negative value is an error, not a wrap-around.
  for (CLI::Option* option : {given->dims, given->capacity, given->batch, given->repeats,
                              given->threads, given->hbm_budget_gb, given->grouped_write_min_batch,
                              given->host_keys_in_flight, given->coalesce_copies_min_batch, seed}) {
    option->check(dynemb::tools::not_negative());
  }
  cmd.add_option(
      "--json", args->json_path,
      "Result file (default bench/results/table-<backend>[-hybrid]-<machine>.json, replaced by "
      "each run; <machine> is $DYNEMB_BENCH_MACHINE or the host name)");
  cmd.add_option("--markdown", args->markdown_path, "Also write the printed tables to this file");
  cmd.add_option("--hkv-output", args->hkv_outputs,
                 "cuda: HKV benchmark outputs of the same device call (hkv_benchmark hbm|hybrid "
                 "DIM CAP_M HBM_GB), comma-separated: ratios use their figures where they have "
                 "the cell, the H100 anchors elsewhere")
      ->delimiter(',');
  cmd.add_flag("--quick", args->quick,
               "Smoke test: capacity 2^16, batch 16384, dim 32 (explicit options still apply)");
  cmd.callback([args, given] {
    dynemb::bench::run_and_report(make_config(*args, *given), std::cout, std::cerr);
  });
}

const bool registered = dynemb::tools::register_command(
    {{"bench", "table"},
     "Hash-table throughput per operation, load factor and dim (HKV's method)",
     install});

}  // namespace

// `dynemb bench dedup`: the training step's dedup per table, side by side, and in one call.
#include <iostream>
#include <memory>
#include <string>

#include "bench/train/dedup_bench.hpp"
#include "command_registry.hpp"
#include "dynemb/core/error.hpp"

namespace {

void install(CLI::App& cmd) {
  auto c = std::make_shared<dynemb::bench::DedupBenchConfig>();
  auto backend = std::make_shared<std::string>("cpu");
  cmd.footer(
      "Times the training step's dedup (unique keys, inverse, ids grouped by key and their bags) "
      "on `dynemb bench train`'s 13m shape: each table's keys in turn, the tables side by side "
      "(one stream and host thread each), and every table's keys in one call (the table index in "
      "the bits above the ids). Prints a table and writes JSON under bench/results/.");
  cmd.add_option("--backend", *backend, "cpu or cuda")->capture_default_str();
  cmd.add_option("--tables", c->tables, "tables")->capture_default_str();
  cmd.add_option("--rows", c->rows_per_table, "ids per table the Zipf draws from")
      ->capture_default_str();
  cmd.add_option("--batch", c->batch, "bags per table")->capture_default_str();
  cmd.add_option("--ids-per-bag", c->ids_per_bag, "ids per bag")->capture_default_str();
  cmd.add_option("--alpha", c->zipf_alpha, "Zipf exponent")->capture_default_str();
  cmd.add_option("--warmup", c->warmup, "untimed runs per scenario")->capture_default_str();
  cmd.add_option("--repeats", c->repeats, "timed runs per scenario (median kept)")
      ->capture_default_str();
  cmd.add_option("--seed", c->seed, "random seed (0 = random)");
  cmd.add_option("--json", c->json_path, "result file (default bench/results/dedup-...json)");
  cmd.callback([c, backend] {
    c->backend = dynemb::parse_backend(*backend);
    const auto report = dynemb::bench::run_dedup_bench(*c, std::cerr);
    dynemb::bench::report_dedup_bench(report, std::cout);
  });
}

const bool registered = dynemb::tools::register_command(
    {{"bench", "dedup"},
     "time the training step's dedup: per table, side by side, one call",
     install});

}  // namespace

// `dynemb bench cache`: the inference embedding cache under a power-law key stream.
#include <iostream>
#include <memory>
#include <string>

#include "bench/cache/cache_bench.hpp"
#include "cache_checkpoint.hpp"
#include "command_registry.hpp"

namespace {

void install(CLI::App& cmd) {
  auto c = std::make_shared<dynemb::bench::CacheBenchConfig>();
  auto backend = std::make_shared<std::string>("cpu");
  cmd.footer(
      "Warms each cache with query-then-replace batches of power-law keys, then times queries on "
      "fresh batches of distinct keys and of raw (repeating) keys, per dim, cache size and keys "
      "per call; then the hit rate against capacity. Each cache gets the bytes HugeCTR's "
      "gpu_cache takes for the same number of rows. Prints a table and writes JSON under "
      "bench/results/ (plot the curve with bench/cache/plot_hit_rate.py).");
  cmd.add_option("--backend", *backend, "cpu or cuda")->capture_default_str();
  cmd.add_option("--ids", c->ids, "ids in the key space")->capture_default_str();
  cmd.add_option("--alpha", c->alpha, "power-law exponent")->capture_default_str();
  cmd.add_option("--dims", c->dims, "row widths")->capture_default_str();
  cmd.add_option("--cache-rows", c->cache_rows, "cache sizes in HugeCTR rows")
      ->capture_default_str();
  cmd.add_option("--batches", c->batches, "keys per query call")->capture_default_str();
  cmd.add_option("--warm", c->warm_batches, "warm-up batches")->capture_default_str();
  cmd.add_option("--warm-draws", c->warm_draws, "draws per warm-up batch")->capture_default_str();
  cmd.add_option("--timed", c->timed_batches, "timed query calls per round")->capture_default_str();
  cmd.add_option("--rounds", c->rounds,
                 "timed rounds per distinct cell (the median round's throughput is reported; "
                 "with --peer, its rounds alternate with dynemb's)")
      ->capture_default_str();
  cmd.add_option("--rounds-max-batch", c->rounds_max_batch,
                 "the largest call taking --rounds rounds (larger calls: one round)")
      ->capture_default_str();
  cmd.add_option("--pipelined", c->pipelined_calls,
                 "back-to-back queries timed together per distinct cell (0 = none)")
      ->capture_default_str();
  cmd.add_option("--peer-raw-timed", c->peer_raw_timed,
                 "the peer's timed calls per raw cell (0 = --timed; HugeCTR takes ~1 s per raw "
                 "call of 1M keys)")
      ->capture_default_str();
  cmd.add_flag("--ordered-misses", c->misses_in_batch_order,
               "queries list their misses in batch order (default: any order, as HugeCTR's)");
  cmd.add_flag("!--kernel-launch-queries", c->query_graphs,
               "CUDA: queries launch their kernel (default: as the cache's per-stream graphs)");
  cmd.add_option("--ways", c->ways, "slots per set (32, 64, 128)")->capture_default_str();
  cmd.add_flag("!--no-curve", c->curve, "skip the hit rate against capacity");
  cmd.add_option("--curve-rows", c->curve_rows, "capacities of the curve (default: 1/8 to 4x)");
  cmd.add_option("--curve-batches", c->curve_batches, "measured batches per capacity")
      ->capture_default_str();
  cmd.add_option("--seed", c->seed, "random seed (0 = random)");
  cmd.add_option("--json", c->json_path, "result file (default bench/results/cache-...json)");
  cmd.add_option("--peer", c->peer_binary,
                 "a HugeCTR gpu_cache peer binary (bench/cache/hugectr_peer/build.sh) to run on "
                 "the same batches, its rounds interleaved with dynemb's");
  auto replay = std::make_shared<dynemb::tools::CheckpointReplayConfig>();
  cmd.add_option("--checkpoint", replay->checkpoint,
                 "instead: load this training checkpoint's embedding rows into a CPU table and a "
                 "preloaded cache (hottest rows by score), then replay power-law lookups");
  cmd.add_option("--table", replay->table, "with --checkpoint: the table (default: the first)");
  cmd.add_option("--replay-cache-rows", replay->cache_rows,
                 "with --checkpoint: cache rows (0 = every row)")
      ->capture_default_str();
  cmd.add_option("--replay-batch", replay->batch, "with --checkpoint: draws per lookup")
      ->capture_default_str();
  cmd.add_option("--replay-calls", replay->calls, "with --checkpoint: timed lookups")
      ->capture_default_str();
  cmd.add_option("--replace-below-hit-rate", replay->replace_below_hit_rate,
                 "with --checkpoint: insert fetched rows while a call's hit rate is below this")
      ->capture_default_str();
  cmd.callback([c, backend, replay] {
    c->backend = dynemb::parse_backend(*backend);
    if (!replay->checkpoint.empty()) {
      replay->backend = c->backend;
      replay->alpha = c->alpha;
      replay->seed = c->seed;
      replay->json_path = c->json_path;
      const auto result = dynemb::tools::run_checkpoint_replay(*replay, std::cerr);
      std::cout << result.dump(2) << "\n";
      return;
    }
    const auto result = dynemb::bench::run_cache_bench(*c, std::cerr);
    dynemb::bench::report_cache_bench(result, std::cout);
  });
}

const bool registered = dynemb::tools::register_command(
    {{"bench", "cache"},
     "time the inference cache's queries on power-law keys (distinct and raw batches)",
     install});

}  // namespace

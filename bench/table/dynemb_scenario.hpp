// Times the dynemb table (any backend) at one (dim, load factor), HKV's way.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "bench/table/bench_clock.hpp"
#include "bench/table/config.hpp"
#include "bench/table/key_source.hpp"
#include "bench/table/results.hpp"
#include "bench/table/timed_batch.hpp"

namespace dynemb::bench {

// What the dynemb run hands to the peers so they are timed on the same keys.
struct DynembScenarioOutput {
  ScenarioResult result;         // dim, capacity, load factor, dynemb timings
  std::vector<uint64_t> stored;  // the keys stored at load factor (before any timed call)
  TimedBatch batch;              // the timed batch
};

// Builds a fixed-capacity TIMESTAMP table, fills it with random keys to `load_factor`, draws a
// 60% present / 40% new batch, and times each of config.ops (best of config.repeats; on CUDA
// after one warm-up call), restoring the table to exactly the filled state before every call.
// The table is freed before returning.
DynembScenarioOutput run_dynemb_scenario(const TableBenchConfig& config, uint32_t dim,
                                         double load_factor, KeySource& fresh, std::mt19937_64& rng,
                                         BenchClock& clock);

}  // namespace dynemb::bench

// `dynemb bench cache`: the inference cache under a power-law key stream, in the method of
// ../shared/ANCHORS.md (HugeCTR gpu_cache): warm with query-then-replace batches, then time
// queries on fresh batches of distinct and of raw (repeating) keys; and the hit rate against
// capacity.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dynemb/core/options.hpp"

namespace dynemb::bench {

struct CacheBenchConfig {
  Backend backend = Backend::kCpu;
  uint64_t ids = 50'000'000;  // ids 1..ids, power-law distributed
  double alpha = 1.2;
  std::vector<uint32_t> dims = {32, 128};
  // Cache sizes in HugeCTR rows: each cache gets the bytes HugeCTR's cache of that many rows
  // takes (key, 8-byte counter and row per slot), so both hold the same number of slots.
  std::vector<uint64_t> cache_rows = {1u << 20, 8u << 20};
  std::vector<uint64_t> batches = {2048, 65536, 1u << 20};  // keys per query call
  uint32_t warm_batches = 20;      // query-then-replace batches before timing
  uint64_t warm_draws = 1u << 20;  // draws per warm batch (deduplicated)
  uint32_t timed_batches = 18;     // timed query calls per round, each on a fresh batch
  // Timed rounds per distinct cell of up to rounds_max_batch keys a call (larger calls: one
  // round). With a peer, its rounds alternate with dynemb's (dynemb first in even rounds, the
  // peer first in odd ones); each side's throughput is its median round's (docs/cache.md).
  uint32_t rounds = 15;
  uint64_t rounds_max_batch = 65536;
  // Distinct cells also time this many back-to-back queries of one batch together (0: none).
  uint32_t pipelined_calls = 20;
  uint32_t ways = 32;
  // The caches' CacheOptions::misses_in_batch_order: off, a query lists its misses in any order
  // (each with its position), as HugeCTR's gpu_cache does.
  bool misses_in_batch_order = false;
  // The caches' CacheOptions::query_graphs (CUDA: queries launched as per-stream graphs).
  bool query_graphs = true;
  bool curve = true;                 // the hit rate against capacity
  std::vector<uint64_t> curve_rows;  // empty: 1/8 .. 4x the largest cache_rows, doubling
  uint32_t curve_batches = 10;       // measured query-then-replace batches per capacity
  uint64_t seed = 0;                 // 0: a random seed (printed and written)
  std::string json_path;             // default bench/results/cache-<backend>-<machine>.json
  // A HugeCTR gpu_cache peer binary (bench/cache/hugectr_peer/build.sh), run as a child process
  // on the same batches (same seed), its rounds interleaved with dynemb's; its figures go beside
  // dynemb's in each cell.
  std::string peer_binary;
  // Timed calls of the peer per raw cell (HugeCTR takes about a second per raw call of 1M keys);
  // 0: timed_batches. Its distinct cells take timed_batches a round, as dynemb's.
  uint32_t peer_raw_timed = 3;
};

// Timed rounds of a distinct cell of `batch` keys a call.
inline uint32_t rounds_for(const CacheBenchConfig& config, uint64_t batch) {
  return batch <= config.rounds_max_batch && config.rounds > 0 ? config.rounds : 1;
}

// Runs the benchmark, printing progress to `log`; returns the result document (also written).
nlohmann::json run_cache_bench(const CacheBenchConfig& config, std::ostream& log);

// Prints the result tables.
void report_cache_bench(const nlohmann::json& result, std::ostream& out);

}  // namespace dynemb::bench

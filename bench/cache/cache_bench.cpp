#include "bench/cache/cache_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <random>
#include <sstream>

#include "bench/cache/hugectr_anchors.hpp"
#include "bench/cache/key_stream.hpp"
#include "bench/cache/peer_process.hpp"
#include "bench/table/bench_clock.hpp"
#include "bench/table/machine_info.hpp"
#include "bench/table/result_file.hpp"
#include "dynemb/cache/embedding_cache.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"

namespace dynemb::bench {
namespace {

using cache::CacheOptions;
using cache::EmbeddingCache;
using Json = nlohmann::json;

// The bytes HugeCTR's gpu_cache takes for `rows` slots: key, 8-byte counter and row per slot, one
// 4-byte lock per set of 64 slots.
uint64_t hugectr_bytes(uint64_t rows, uint32_t dim) {
  return rows * (8 + 8 + 4ull * dim) + rows / 64 * 4;
}

// The row the benchmark stores for a key (checked when read back).
float row_value(int64_t key, uint32_t j) {
  return static_cast<float>((static_cast<uint64_t>(key) * 131 + j) & 0xFFFFFF);
}

// Device (or host) buffers sized for the largest call.
struct Buffers {
  Backend backend;
  BackendBuffer<int64_t> keys, missing;
  BackendBuffer<uint64_t> positions, count;
  BackendBuffer<float> values, rows;
  Buffers(Backend b, uint64_t max_keys, uint32_t max_dim)
      : backend(b),
        keys(b, max_keys),
        missing(b, max_keys),
        positions(b, max_keys),
        count(b, 1),
        values(b, max_keys * max_dim),
        rows(b, max_keys * max_dim) {}
  // Waits until what was uploaded has arrived: a cudaMemcpy from pageable memory may return
  // before its DMA is done, and the benchmark's stream (non-blocking) is not ordered after it, so
  // a call could read part of the previous batch (the HugeCTR peer does the same).
  void settle() const { backend_synchronize(backend); }
};

// Runs one query on `batch` (uploaded first); returns the misses. The timing covers the query
// alone when a clock is given: *seconds by the clock (CUDA events around the call on its
// stream), *host_seconds the time the call took to return (steady_clock).
uint64_t query(EmbeddingCache<int64_t>& cache, Buffers& buf, const KeyBatch& batch,
               BenchClock& clock, double* seconds, double* host_seconds = nullptr) {
  const size_t n = batch.keys.size();
  buf.keys.upload(batch.keys.data(), n);
  buf.settle();
  clock.synchronize();
  if (seconds != nullptr) clock.start();
  const auto called = std::chrono::steady_clock::now();
  cache.query(n, buf.keys.data(), buf.values.data(), buf.missing.data(), buf.positions.data(),
              buf.count.data(), clock.stream());
  if (host_seconds != nullptr) {
    *host_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count();
  }
  if (seconds != nullptr) {
    *seconds = clock.stop();
  } else {
    clock.synchronize();
  }
  uint64_t misses = 0;
  buf.count.download(&misses, 1);
  return misses;
}

// Seconds per call of `calls` queries of `batch` issued back to back on the stream and timed
// together: the device's time per call where the host issues faster than the device works,
// the host's otherwise.
double pipelined_seconds(EmbeddingCache<int64_t>& cache, Buffers& buf, const KeyBatch& batch,
                         BenchClock& clock, uint32_t calls) {
  const size_t n = batch.keys.size();
  buf.keys.upload(batch.keys.data(), n);
  buf.settle();
  clock.synchronize();
  clock.start();
  for (uint32_t c = 0; c < calls; ++c) {
    cache.query(n, buf.keys.data(), buf.values.data(), buf.missing.data(), buf.positions.data(),
                buf.count.data(), clock.stream());
  }
  return clock.stop() / calls;
}

// The clock's floor: the median of 50 timed 8-byte memsets on the stream (no cache involved).
double floor_seconds(Backend backend, Buffers& buf, BenchClock& clock) {
  std::vector<double> seconds;
  for (int i = 0; i < 50; ++i) {
    clock.synchronize();
    clock.start();
    backend_zero(backend, buf.count.data(), sizeof(uint64_t), clock.stream());
    seconds.push_back(clock.stop());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// Puts the last query's `misses` missing keys into the cache with their rows; returns the
// seconds the replace took when `timed`.
double replace_misses(EmbeddingCache<int64_t>& cache, Buffers& buf, uint64_t misses,
                      BenchClock& clock, bool timed) {
  if (misses == 0) return 0.0;
  const uint32_t dim = cache.dim();
  std::vector<int64_t> keys(misses);
  buf.missing.download(keys.data(), misses);
  std::vector<float> rows(misses * dim);
  for (uint64_t i = 0; i < misses; ++i) {
    for (uint32_t j = 0; j < dim; ++j) rows[i * dim + j] = row_value(keys[i], j);
  }
  buf.rows.upload(rows.data(), rows.size());
  buf.settle();
  clock.synchronize();
  if (timed) clock.start();
  cache.replace(misses, buf.missing.data(), buf.rows.data(), clock.stream());
  if (timed) return clock.stop();
  clock.synchronize();
  return 0.0;
}

void warm(EmbeddingCache<int64_t>& cache, Buffers& buf, const std::vector<KeyBatch>& batches,
          BenchClock& clock) {
  for (const KeyBatch& b : batches) {
    replace_misses(cache, buf, query(cache, buf, b, clock, nullptr), clock, false);
  }
}

// Rows of the last query's hits that differ from what was stored (the benchmark's own check).
uint64_t wrong_rows(EmbeddingCache<int64_t>& cache, Buffers& buf, const KeyBatch& batch,
                    uint64_t misses) {
  const uint32_t dim = cache.dim();
  const size_t n = batch.keys.size();
  std::vector<float> values(n * dim);
  std::vector<uint64_t> positions(misses);
  buf.values.download(values.data(), values.size());
  buf.positions.download(positions.data(), misses);
  std::vector<bool> missed(n, false);
  for (uint64_t p : positions) missed[p] = true;
  uint64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    if (missed[i]) continue;
    for (uint32_t j = 0; j < dim; ++j) {
      if (values[i * dim + j] != row_value(batch.keys[i], j)) {
        ++wrong;
        break;
      }
    }
  }
  return wrong;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// The probability mass of ids 1..c for each c in `capacities` (one pass over the id space).
std::map<uint64_t, double> head_masses(uint64_t ids, double alpha, std::vector<uint64_t> caps) {
  std::sort(caps.begin(), caps.end());
  std::map<uint64_t, double> head;
  double total = 0.0;
  size_t next = 0;
  for (uint64_t k = 1; k <= ids; ++k) {
    total += std::pow(static_cast<double>(k), -alpha);
    while (next < caps.size() && caps[next] == k) head[caps[next++]] = total;
  }
  for (auto& [c, mass] : head) mass /= total;
  for (; next < caps.size(); ++next) head[caps[next]] = 1.0;
  return head;
}

std::unique_ptr<EmbeddingCache<int64_t>> make_bench_cache(const CacheBenchConfig& config,
                                                          uint64_t rows, uint32_t dim) {
  CacheOptions<int64_t> options;
  options.dim = dim;
  options.ways = config.ways;
  options.capacity_bytes = hugectr_bytes(rows, dim);
  options.validate_keys = false;  // no per-call sentinel scan (HugeCTR has none either)
  options.misses_in_batch_order = config.misses_in_batch_order;
  options.query_graphs = config.query_graphs;
  return cache::make_cache<int64_t>(config.backend, options);
}

template <class T>
std::string join(const std::vector<T>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

// Starts the HugeCTR peer on the same parameters and seed (it draws the same batches).
std::unique_ptr<PeerProcess> start_peer(const CacheBenchConfig& config, uint64_t seed,
                                        std::ostream& log) {
  std::vector<uint32_t> rounds;
  for (const uint64_t size : config.batches) rounds.push_back(rounds_for(config, size));
  std::ostringstream command;
  command << std::setprecision(17) << config.peer_binary << " " << config.ids << " " << config.alpha
          << " " << seed << " " << join(config.batches) << " " << join(rounds) << " "
          << config.warm_batches << " " << config.warm_draws << " " << config.timed_batches << " "
          << (config.peer_raw_timed == 0 ? config.timed_batches
                                         : std::min(config.peer_raw_timed, config.timed_batches));
  log << "starting the HugeCTR peer: " << command.str() << "\n";
  return std::make_unique<PeerProcess>(command.str());
}

// Asks the peer and checks its answer is `expected`.
void ask_peer(PeerProcess& peer, const std::string& line, const std::string& expected) {
  std::string answer;
  try {
    answer = peer.ask(line);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) +
                " (a peer built before the interleaved rounds exits at once: rebuild it with "
                "bench/cache/hugectr_peer/build.sh)");
  }
  if (answer != expected) {
    throw Error("dynemb bench cache: the peer answered '" + answer + "' to '" + line + "'");
  }
}

// One side's timed calls of a cell, round by round.
struct Timings {
  std::vector<double> seconds, host_seconds;  // every call
  std::vector<double> round_seconds;          // per round: its calls' seconds summed
  std::vector<uint64_t> round_keys;           // per round: its calls' keys
  uint64_t keys = 0, hits = 0, draws = 0;

  // Adds a round of calls (seconds, host seconds) that queried `keys` keys and hit `hits`.
  void add_round(const std::vector<double>& s, const std::vector<double>& host,
                 uint64_t round_keys_, uint64_t round_hits) {
    seconds.insert(seconds.end(), s.begin(), s.end());
    host_seconds.insert(host_seconds.end(), host.begin(), host.end());
    double total = 0.0;
    for (double t : s) total += t;
    round_seconds.push_back(total);
    round_keys.push_back(round_keys_);
    keys += round_keys_;
    hits += round_hits;
  }
  // Million keys per second of round r.
  double round_rate(size_t r) const {
    return static_cast<double>(round_keys[r]) / round_seconds[r] / 1e6;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

// A side's figures for a cell: the median round's throughput (the headline), every round's, the
// hit rate and the latency percentiles over all calls.
Json summarize(const Timings& t) {
  std::vector<double> rates;
  for (size_t r = 0; r < t.round_seconds.size(); ++r) rates.push_back(t.round_rate(r));
  double total = 0.0;
  for (double s : t.seconds) total += s;
  Json j = {{"calls", t.seconds.size()},
            {"rounds", rates.size()},
            {"keys", t.keys},
            {"seconds", total},
            {"mkeys_per_s", median(rates)},
            {"round_mkeys_per_s", rates},
            {"round_spread",
             {{"min", *std::min_element(rates.begin(), rates.end())},
              {"max", *std::max_element(rates.begin(), rates.end())}}},
            {"mean_mkeys_per_s", static_cast<double>(t.keys) / total / 1e6},
            {"hit_rate", static_cast<double>(t.hits) / static_cast<double>(t.keys)},
            {"latency_us",
             {{"p50", percentile(t.seconds, 0.5) * 1e6},
              {"p90", percentile(t.seconds, 0.9) * 1e6},
              {"p99", percentile(t.seconds, 0.99) * 1e6},
              {"max", percentile(t.seconds, 1.0) * 1e6}}},
            {"host_us_p50", percentile(t.host_seconds, 0.5) * 1e6}};
  if (t.draws != 0) j["draws"] = t.draws;
  return j;
}

// The peer's answer to a `time` command, as a round of its Timings.
void add_peer_round(Timings& t, const std::string& answer) {
  const Json j = Json::parse(answer);
  t.add_round(j.at("seconds").get<std::vector<double>>(),
              j.at("host_seconds").get<std::vector<double>>(), j.at("keys").get<uint64_t>(),
              j.at("hits").get<uint64_t>());
}

}  // namespace

Json run_cache_bench(const CacheBenchConfig& config, std::ostream& log) {
  require(!config.dims.empty() && !config.cache_rows.empty() && !config.batches.empty(),
          "dynemb bench cache", "dims / cache-rows / batches", "empty", "each needs a value");
  require(config.timed_batches > 0, "dynemb bench cache", "timed", "0", "must be > 0");
  uint64_t seed = config.seed;
  if (seed == 0)
    seed = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  log << "dynemb bench cache: seed " << seed << "\n";
  const auto began = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  Json wall;  // seconds of each part of the run
  const KeyStreamSpec spec{config.ids, config.alpha, seed};
  auto clock = make_bench_clock(config.backend);
  const uint64_t max_batch =
      std::max(*std::max_element(config.batches.begin(), config.batches.end()), config.warm_draws);
  const uint32_t max_dim = *std::max_element(config.dims.begin(), config.dims.end());

  Json result;
  result["benchmark"] = "cache";
  const MachineInfo machine = query_machine_info();
  result["machine"] = machine_json(machine);
  result["gpu"] = gpu_json(config.backend == Backend::kCuda ? query_gpu_info(0) : std::nullopt);
  result["commit"] = git_commit(DYNEMB_SOURCE_DIR);
  result["date"] = utc_now_iso8601();
  result["params"] = {{"backend", to_string(config.backend)},
                      {"ids", config.ids},
                      {"alpha", config.alpha},
                      {"dims", config.dims},
                      {"cache_rows", config.cache_rows},
                      {"cache_bytes_rule", "bytes of HugeCTR's cache of cache_rows rows"},
                      {"batches", config.batches},
                      {"warm_batches", config.warm_batches},
                      {"warm_draws", config.warm_draws},
                      {"timed_batches", config.timed_batches},
                      {"rounds", config.rounds},
                      {"rounds_max_batch", config.rounds_max_batch},
                      {"rounds_method",
                       "distinct cells of up to rounds_max_batch keys a call: `rounds` rounds of "
                       "timed_batches fresh batches; with the peer, each round of dynemb's and "
                       "the peer's on the same batches next to each other (dynemb first in even "
                       "rounds, the peer first in odd ones); mkeys_per_s is the median round's "
                       "(keys / summed call seconds), round_spread the slowest and fastest "
                       "round's, round_ratios each round's ratio; latency percentiles over all "
                       "calls; larger calls and raw cells: one round"},
                      {"untimed_first_call", "one query of each call size before its cells"},
                      {"pipelined_calls", config.pipelined_calls},
                      {"peer_raw_timed", config.peer_raw_timed},
                      {"ways", config.ways},
                      {"validate_keys", false},
                      {"misses_in_batch_order", config.misses_in_batch_order},
                      {"query_graphs", config.query_graphs},
                      {"key_type", "int64"},
                      {"seed", seed},
                      {"distinct_batch", "draws until the batch holds `batch` distinct keys"},
                      {"raw_batch", "`batch` draws as drawn"},
                      {"timing", config.backend == Backend::kCuda
                                     ? "CUDA events around each query call on its stream"
                                     : "steady_clock around each query call"},
                      {"host_us_p50", "steady_clock from the call to its return (no sync)"},
                      {"pipelined_us",
                       "distinct cells: pipelined_calls queries of the first batch back to back, "
                       "timed together, per call"},
                      {"clock_floor_us", "median of 50 timed 8-byte memsets on the stream"}};

  log << "generating keys ...\n";
  const std::vector<KeyBatch> warm_set =
      deduplicated_batches(spec, 1, config.warm_batches, config.warm_draws);
  // Distinct cells: rounds_for(size) rounds of timed_batches fresh batches (round r takes
  // batches r * timed .. (r + 1) * timed - 1); raw cells: one round.
  std::map<uint64_t, std::vector<KeyBatch>> distinct, raw;
  for (size_t s = 0; s < config.batches.size(); ++s) {
    const uint64_t size = config.batches[s];
    distinct[size] =
        distinct_batches(spec, 100 + s, rounds_for(config, size) * config.timed_batches, size);
    raw[size] = raw_batches(spec, 200 + s, config.timed_batches, size);
  }
  Buffers buf(config.backend, max_batch, max_dim);
  result["clock_floor_us"] = floor_seconds(config.backend, buf, *clock) * 1e6;
  std::unique_ptr<PeerProcess> peer;
  if (!config.peer_binary.empty()) peer = start_peer(config, seed, log);

  Json cells = Json::array();
  Json replaces = Json::array();
  uint64_t wrong = 0;
  for (const uint32_t dim : config.dims) {
    for (const uint64_t rows : config.cache_rows) {
      auto cache = make_bench_cache(config, rows, dim);
      log << "dim " << dim << ", cache " << rows << " rows (" << cache->footprint().slots
          << " slots, " << cache->footprint().bytes << " bytes): warming ...\n";
      warm(*cache, buf, warm_set, *clock);
      if (peer) {
        ask_peer(*peer, "open " + std::to_string(dim) + " " + std::to_string(rows), "ready");
      }
      uint64_t last_misses = 0;
      const KeyBatch* last_batch = nullptr;
      for (const uint64_t size : config.batches) {
        // One untimed query of this size first (the peer does the same): a call size not seen
        // in the warm-up may take a kernel the process has not loaded yet.
        query(*cache, buf, distinct[size].front(), *clock, nullptr);
        if (peer) ask_peer(*peer, "first " + std::to_string(size), "ok");
        for (const std::string mode : {"distinct", "raw"}) {
          const auto& batches = mode == "distinct" ? distinct[size] : raw[size];
          const uint32_t rounds = mode == "distinct" ? rounds_for(config, size) : 1;
          const size_t per_round = mode == "distinct" ? config.timed_batches : batches.size();
          Timings ours, theirs;
          // dynemb's round r: batches r * per_round .. (r + 1) * per_round - 1.
          const auto our_round = [&](uint32_t r) {
            std::vector<double> seconds, host_seconds;
            uint64_t keys = 0, hits = 0;
            for (size_t b = r * per_round; b < (r + 1) * per_round; ++b) {
              double t = 0.0, host = 0.0;
              const uint64_t misses = query(*cache, buf, batches[b], *clock, &t, &host);
              seconds.push_back(t);
              host_seconds.push_back(host);
              keys += batches[b].keys.size();
              hits += batches[b].keys.size() - misses;
              ours.draws += batches[b].total_draws;
              if (b == 0) wrong += wrong_rows(*cache, buf, batches[b], misses);
              last_misses = misses;
              last_batch = &batches[b];
            }
            ours.add_round(seconds, host_seconds, keys, hits);
          };
          const auto their_round = [&](uint32_t r) {
            add_peer_round(theirs, peer->ask("time " + std::to_string(size) + " " + mode + " " +
                                             std::to_string(r)));
          };
          // Interleaved: dynemb first in even rounds, the peer first in odd ones, so that
          // neither side always runs right after the other.
          for (uint32_t r = 0; r < rounds; ++r) {
            if (peer && r % 2 == 1) their_round(r);
            our_round(r);
            if (peer && r % 2 == 0) their_round(r);
          }
          Json cell = {{"dim", dim},
                       {"cache_rows", rows},
                       {"slots", cache->footprint().slots},
                       {"cache_bytes", cache->footprint().bytes},
                       {"batch", size},
                       {"mode", mode}};
          cell.update(summarize(ours));
          if (config.pipelined_calls > 0 && mode == "distinct") {
            cell["pipelined_us"] =
                pipelined_seconds(*cache, buf, batches.front(), *clock, config.pipelined_calls) *
                1e6;
          }
          if (const auto a = hugectr_anchor(dim, rows, size); a && mode == "distinct") {
            cell["hugectr_anchor"] = {{"mkeys_per_s", a->mkeys_per_s}, {"hit_rate", a->hit_rate}};
            cell["ratio_to_hugectr"] = cell["mkeys_per_s"].get<double>() / a->mkeys_per_s;
          }
          if (mode == "raw") {
            cell["hugectr_anchor_range"] = {{"min_mkeys_per_s", kHugeCtrRawMinMkeys},
                                            {"max_mkeys_per_s", kHugeCtrRawMaxMkeys}};
          }
          if (peer) {
            Json p = summarize(theirs);
            if (config.pipelined_calls > 0 && mode == "distinct") {
              p.update(Json::parse(peer->ask("pipe " + std::to_string(size) + " " +
                                             std::to_string(config.pipelined_calls))));
            }
            cell["hugectr_same_run"] = p;
            cell["ratio_to_hugectr_same_run"] =
                cell["mkeys_per_s"].get<double>() / p["mkeys_per_s"].get<double>();
            if (theirs.round_seconds.size() == ours.round_seconds.size()) {
              // Each round's ratio (the rounds run next to each other): the verdict's spread.
              std::vector<double> ratios;
              for (size_t r = 0; r < ours.round_seconds.size(); ++r) {
                ratios.push_back(ours.round_rate(r) / theirs.round_rate(r));
              }
              cell["round_ratios"] = ratios;
              cell["round_ratio_spread"] = {
                  {"min", *std::min_element(ratios.begin(), ratios.end())},
                  {"median", median(ratios)},
                  {"max", *std::max_element(ratios.begin(), ratios.end())}};
            }
          }
          log << "  batch " << size << " " << mode << ": " << std::setprecision(4)
              << cell["mkeys_per_s"].get<double>() << " M keys/s, hit "
              << cell["hit_rate"].get<double>() << "\n";
          cells.push_back(cell);
        }
      }
      if (peer) ask_peer(*peer, "close", "ok");
      // The replace that follows a query of the last batch: its misses.
      if (last_batch != nullptr) {
        const double t = replace_misses(*cache, buf, last_misses, *clock, true);
        replaces.push_back({{"dim", dim},
                            {"cache_rows", rows},
                            {"batch", last_batch->keys.size()},
                            {"misses", last_misses},
                            {"ms", t * 1e3}});
      }
    }
  }
  peer.reset();
  wall["cells"] = since(began);
  result["cells"] = cells;
  result["replace_misses"] = replaces;
  result["wrong_rows"] = wrong;
  result["peer"] = {
      {"name", "HugeCTR gpu_cache (nv_gpu_cache, int64 keys, 2 slabs of 32 per set)"},
      {"source", "../shared/ANCHORS.md: measured by the project on a lent H100, not in this run"},
      {"raw_batches_mkeys_per_s", {kHugeCtrRawMinMkeys, kHugeCtrRawMaxMkeys}}};

  const auto curve_began = std::chrono::steady_clock::now();
  if (config.curve) {
    std::vector<uint64_t> caps = config.curve_rows;
    if (caps.empty()) {
      const uint64_t top = *std::max_element(config.cache_rows.begin(), config.cache_rows.end());
      for (uint64_t c = std::max<uint64_t>(top / 8, 1024); c <= top * 4; c *= 2) caps.push_back(c);
    }
    log << "hit rate against capacity ...\n";
    const std::vector<KeyBatch> measured =
        deduplicated_batches(spec, 300, config.curve_batches, config.warm_draws);
    const std::map<uint64_t, double> ideal = head_masses(config.ids, config.alpha, caps);
    Json curve = Json::array();
    const uint32_t dim = config.dims.front();
    for (const uint64_t rows : caps) {
      auto cache = make_bench_cache(config, rows, dim);
      warm(*cache, buf, warm_set, *clock);
      uint64_t keys = 0, hits = 0, draws = 0, draw_hits = 0;
      for (const KeyBatch& b : measured) {
        const uint64_t misses = query(*cache, buf, b, *clock, nullptr);
        std::vector<uint64_t> positions(misses);
        buf.positions.download(positions.data(), misses);
        std::vector<bool> missed(b.keys.size(), false);
        for (uint64_t p : positions) missed[p] = true;
        for (size_t i = 0; i < b.keys.size(); ++i) {
          if (!missed[i]) draw_hits += b.draws[i];
        }
        keys += b.keys.size();
        hits += b.keys.size() - misses;
        draws += b.total_draws;
        replace_misses(*cache, buf, misses, *clock, false);
      }
      curve.push_back({{"cache_rows", rows},
                       {"slots", cache->footprint().slots},
                       {"dim", dim},
                       {"distinct_hit_rate", static_cast<double>(hits) / keys},
                       {"draw_hit_rate", static_cast<double>(draw_hits) / draws},
                       {"ideal_draw_hit_rate", ideal.at(rows)}});
      log << "  " << rows << " rows: distinct hit " << curve.back()["distinct_hit_rate"]
          << ", per draw " << curve.back()["draw_hit_rate"] << " (ideal " << ideal.at(rows)
          << ")\n";
    }
    result["curve"] = {{"batches", config.curve_batches},
                       {"draws_per_batch", config.warm_draws},
                       {"method",
                        "after the warm-up, query-then-replace batches of the distinct keys of "
                        "warm_draws draws; draw_hit_rate weights each key by its draws; "
                        "ideal_draw_hit_rate is the mass of the cache_rows most frequent ids"},
                       {"points", curve}};
  }

  const std::string path =
      config.json_path.empty()
          ? default_result_path(DYNEMB_SOURCE_DIR, "cache-" + to_string(config.backend),
                                machine.hostname)
          : config.json_path;
  wall["curve"] = since(curve_began);
  wall["total"] = since(began);
  result["wall_seconds"] = wall;
  write_json_file(path, result);
  result["path"] = path;
  return result;
}

void report_cache_bench(const Json& result, std::ostream& out) {
  // host: the call's own time to return; pipe: per call of back-to-back calls (distinct cells).
  const auto us = [](const Json& cell, const char* key) {
    std::ostringstream text;
    if (cell.contains(key)) text << std::fixed << std::setprecision(1) << cell[key].get<double>();
    return text.str();
  };
  out << "\n"
      << std::left << std::setw(5) << "dim" << std::setw(10) << "rows" << std::setw(9) << "batch"
      << std::setw(10) << "mode" << std::right << std::setw(10) << "M keys/s" << std::setw(7)
      << "hit" << std::setw(9) << "p50 us" << std::setw(9) << "p99 us" << std::setw(8) << "host"
      << std::setw(8) << "pipe" << std::setw(16) << "HugeCTR M/s" << std::setw(18)
      << "its p50/host/pipe"
      << "  ratio (rounds' range)"
      << "\n";
  for (const Json& c : result["cells"]) {
    std::ostringstream peer, peer_us, ratio;
    if (c.contains("hugectr_same_run")) {
      const Json& p = c["hugectr_same_run"];
      peer << std::fixed << std::setprecision(1) << p["mkeys_per_s"].get<double>() << " ("
           << std::setprecision(2) << p["hit_rate"].get<double>() << ")*";
      peer_us << std::fixed << std::setprecision(1) << p["latency_us"]["p50"].get<double>() << "/"
              << us(p, "host_us_p50") << "/" << us(p, "pipelined_us");
      ratio << std::fixed << std::setprecision(2) << c["ratio_to_hugectr_same_run"].get<double>()
            << "x";
      if (c.contains("round_ratio_spread")) {
        ratio << " (" << c["round_ratio_spread"]["min"].get<double>() << "-"
              << c["round_ratio_spread"]["max"].get<double>() << ")";
      }
    } else if (c.contains("hugectr_anchor")) {
      peer << std::fixed << std::setprecision(0) << c["hugectr_anchor"]["mkeys_per_s"].get<double>()
           << " (" << std::setprecision(2) << c["hugectr_anchor"]["hit_rate"].get<double>() << ")";
      ratio << std::fixed << std::setprecision(2) << c["ratio_to_hugectr"].get<double>() << "x";
    } else if (c.contains("hugectr_anchor_range")) {
      peer << "1.3-4.9";
    }
    out << std::left << std::setw(5) << c["dim"].get<uint32_t>() << std::setw(10)
        << c["cache_rows"].get<uint64_t>() << std::setw(9) << c["batch"].get<uint64_t>()
        << std::setw(10) << c["mode"].get<std::string>() << std::right << std::fixed
        << std::setprecision(1) << std::setw(10) << c["mkeys_per_s"].get<double>()
        << std::setprecision(3) << std::setw(7) << c["hit_rate"].get<double>()
        << std::setprecision(1) << std::setw(9) << c["latency_us"]["p50"].get<double>()
        << std::setw(9) << c["latency_us"]["p99"].get<double>() << std::setw(8)
        << us(c, "host_us_p50") << std::setw(8) << us(c, "pipelined_us") << std::setw(16)
        << peer.str() << std::setw(18) << peer_us.str() << "  " << ratio.str() << "\n";
  }
  if (result.contains("wall_seconds")) out << "wall seconds: " << result["wall_seconds"] << "\n";
  if (result.contains("clock_floor_us")) {
    out << "clock floor (one 8-byte memset, timed as a query is): " << std::setprecision(1)
        << result["clock_floor_us"].get<double>() << " us\n";
  }
  for (const Json& r : result["replace_misses"]) {
    out << "replace of " << r["misses"] << " misses (dim " << r["dim"] << ", " << r["cache_rows"]
        << " rows): " << std::setprecision(3) << r["ms"].get<double>() << " ms\n";
  }
  out << "wrong rows read back: " << result["wrong_rows"] << "\n";
  out << "M keys/s: the median round's (rounds of " << result["params"]["timed_batches"]
      << " calls; " << result["params"]["rounds"] << " rounds for calls of up to "
      << result["params"]["rounds_max_batch"] << " distinct keys, else 1)\n";
  out << "HugeCTR figures: * = measured in this run on the same batches, its rounds interleaved "
         "with dynemb's; others from ../shared/ANCHORS.md (another run on a lent H100)\n";
  out << "written: " << result["path"].get<std::string>() << "\n";
}

}  // namespace dynemb::bench

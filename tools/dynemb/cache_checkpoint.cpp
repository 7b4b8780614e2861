#include "cache_checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>

#include "bench/cache/power_law.hpp"
#include "bench/table/bench_clock.hpp"
#include "bench/table/machine_info.hpp"
#include "bench/table/result_file.hpp"
#include "dynemb/cache/cached_lookup.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::tools {
namespace {

using Json = nlohmann::json;

// The lower tier as the cache's lookup path sees it: a CPU table's rows.
template <TableKey K>
class TableMissSource final : public cache::MissSource<K> {
 public:
  explicit TableMissSource(Table<K>& table) : table_(table) {}
  uint32_t dim() const override { return table_.dim(); }
  void fetch(size_t n, const K* keys, float* rows, bool* founds) override {
    table_.find(n, keys, rows, founds, nullptr);
  }

 private:
  Table<K>& table_;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

template <TableKey K>
Json replay(const CheckpointReplayConfig& config, const checkpoint::TableEntry& entry,
            uint64_t seed, std::ostream& log) {
  const char* where = "dynemb bench cache --checkpoint";
  require(entry.rows > 0, where, "table rows", "0", "the table must hold rows");
  // The lower tier: a CPU table at load factor 0.5 holding every row.
  TableOptions options;
  options.dim = entry.dim;
  const uint64_t buckets = (entry.rows * 2 + 127) / 128;
  options.init_capacity = std::max<uint64_t>(buckets, 1) * 128;
  options.max_capacity = options.init_capacity;
  options.score_policy = parse_score_policy(entry.score_policy);  // so the scores are restored
  auto table = make_table<K>(Backend::kCpu, options);
  checkpoint::LoadOptions load;
  load.only = {entry.name};
  load.optimizer_state = false;  // the embedding part only
  const auto t0 = std::chrono::steady_clock::now();
  const checkpoint::LoadReport loaded =
      checkpoint::load(config.checkpoint, {checkpoint::named(entry.name, *table)}, load);
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log << "loaded " << loaded.rows_loaded << " rows of \"" << entry.name << "\" (dim " << entry.dim
      << ") in " << load_seconds << " s\n";

  // Every row, hottest (highest score) first.
  std::vector<K> keys(table->size());
  std::vector<float> values(keys.size() * entry.dim);
  std::vector<uint64_t> scores(keys.size());
  size_t count = 0;
  for (size_t offset = 0; offset < table->capacity(); offset += 1 << 16) {
    count += table->export_batch(offset, 1 << 16, keys.data() + count,
                                 values.data() + count * entry.dim, scores.data() + count);
  }
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });

  cache::CacheOptions<K> cache_options;
  cache_options.dim = entry.dim;
  cache_options.capacity_rows = config.cache_rows == 0 ? count : config.cache_rows;
  cache_options.validate_keys = false;
  // A sentinel no loaded key equals: the type's maximum, else one below the smallest key.
  cache_options.empty_key = std::numeric_limits<K>::max();
  if (std::find(keys.begin(), keys.begin() + count, cache_options.empty_key) !=
      keys.begin() + count) {
    cache_options.empty_key = *std::min_element(keys.begin(), keys.begin() + count) - 1;
  }
  auto cache = cache::make_cache<K>(config.backend, cache_options);
  const size_t preload_rows = std::min<size_t>(count, cache->footprint().rows);
  std::vector<K> hot_keys(preload_rows);
  std::vector<float> hot_rows(preload_rows * entry.dim);
  for (size_t i = 0; i < preload_rows; ++i) {
    hot_keys[i] = keys[order[i]];
    std::copy_n(values.begin() + order[i] * entry.dim, entry.dim, hot_rows.begin() + i * entry.dim);
  }
  BackendBuffer<K> d_keys(config.backend, std::max<size_t>(preload_rows, config.batch));
  BackendBuffer<float> d_values(config.backend,
                                std::max<size_t>(preload_rows, config.batch) * entry.dim);
  d_keys.upload(hot_keys.data(), preload_rows);
  d_values.upload(hot_rows.data(), hot_rows.size());
  const size_t not_fitted = cache->preload(preload_rows, d_keys.data(), d_values.data());
  log << "preloaded " << preload_rows << " of " << count << " rows into a "
      << to_string(config.backend) << " cache of " << cache->footprint().rows << " rows ("
      << not_fitted << " did not fit)\n";

  // Replay: draws of rank r (1 = hottest) stand for the r-th hottest key.
  TableMissSource<K> source(*table);
  cache::LookupOptions lookup_options;
  lookup_options.replace_below_hit_rate = config.replace_below_hit_rate;
  cache::CachedLookup<K> lookup(*cache, source, lookup_options);
  const bench::PowerLawSampler sampler(count, config.alpha);
  std::mt19937_64 rng(seed);
  auto clock = bench::make_bench_clock(config.backend);
  std::vector<double> seconds;
  uint64_t hits = 0, fetched = 0, absent = 0, wrong = 0;
  std::vector<K> batch(config.batch);
  std::vector<float> out(config.batch * entry.dim);
  for (uint32_t call = 0; call < config.calls; ++call) {
    for (auto& k : batch) k = keys[order[sampler(rng) - 1]];
    d_keys.upload(batch.data(), batch.size());
    clock->synchronize();
    const auto start = std::chrono::steady_clock::now();
    const cache::LookupResult r =
        lookup.lookup(batch.size(), d_keys.data(), d_values.data(), clock->stream());
    clock->synchronize();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    hits += r.hits;
    fetched += r.fetched;
    absent += r.absent;
    if (call == 0 || call + 1 == config.calls) {  // every row against the lower tier's
      d_values.download(out.data(), out.size());
      std::vector<float> want(out.size());
      std::unique_ptr<bool[]> founds(new bool[batch.size()]);
      table->find(batch.size(), batch.data(), want.data(), founds.get(), nullptr);
      for (size_t i = 0; i < batch.size(); ++i) {
        wrong += !std::equal(want.begin() + i * entry.dim, want.begin() + (i + 1) * entry.dim,
                             out.begin() + i * entry.dim);
      }
    }
  }
  double total = 0.0;
  for (double s : seconds) total += s;
  const double keys_total = static_cast<double>(config.batch) * config.calls;
  Json result = {{"table", entry.name},
                 {"rows", count},
                 {"dim", entry.dim},
                 {"load_seconds", load_seconds},
                 {"cache_rows", cache->footprint().rows},
                 {"cache_slots", cache->footprint().slots},
                 {"cache_bytes", cache->footprint().bytes},
                 {"preloaded", preload_rows},
                 {"preload_not_fitted", not_fitted},
                 {"calls", config.calls},
                 {"batch", config.batch},
                 {"mkeys_per_s", keys_total / total / 1e6},
                 {"hit_rate", static_cast<double>(hits) / keys_total},
                 {"fetched", fetched},
                 {"absent", absent},
                 {"wrong_rows", wrong},
                 {"latency_us",
                  {{"p50", percentile(seconds, 0.5) * 1e6},
                   {"p90", percentile(seconds, 0.9) * 1e6},
                   {"p99", percentile(seconds, 0.99) * 1e6}}}};
  return result;
}

}  // namespace

Json run_checkpoint_replay(const CheckpointReplayConfig& config, std::ostream& log) {
  const char* where = "dynemb bench cache --checkpoint";
  require(config.batch > 0, where, "batch", "0", "must be > 0");
  require(config.calls > 0, where, "calls", "0", "must be > 0");
  const checkpoint::Manifest manifest = checkpoint::read_manifest(config.checkpoint);
  require(!manifest.tables.empty(), where, "checkpoint", config.checkpoint, "holds no table");
  const checkpoint::TableEntry* entry = &manifest.tables.front();
  if (!config.table.empty()) {
    const auto it = std::find_if(manifest.tables.begin(), manifest.tables.end(),
                                 [&](const auto& t) { return t.name == config.table; });
    require(it != manifest.tables.end(), where, "table", config.table,
            "must name a table of the checkpoint");
    entry = &*it;
  }
  uint64_t seed = config.seed;
  if (seed == 0)
    seed = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  log << where << ": seed " << seed << "\n";
  Json result = entry->key_dtype == checkpoint::Dtype::kUint64
                    ? replay<uint64_t>(config, *entry, seed, log)
                    : replay<int64_t>(config, *entry, seed, log);
  const bench::MachineInfo machine = bench::query_machine_info();
  result["benchmark"] = "cache-replay";
  result["machine"] = bench::machine_json(machine);
  result["gpu"] =
      bench::gpu_json(config.backend == Backend::kCuda ? bench::query_gpu_info(0) : std::nullopt);
  result["commit"] = bench::git_commit(DYNEMB_SOURCE_DIR);
  result["date"] = bench::utc_now_iso8601();
  result["params"] = {{"checkpoint", config.checkpoint},
                      {"backend", to_string(config.backend)},
                      {"alpha", config.alpha},
                      {"seed", seed},
                      {"replace_below_hit_rate", config.replace_below_hit_rate},
                      {"timing", "steady_clock around each lookup call, stream synchronized"}};
  const std::string path =
      config.json_path.empty()
          ? bench::default_result_path(
                DYNEMB_SOURCE_DIR, "cache-replay-" + to_string(config.backend), machine.hostname)
          : config.json_path;
  bench::write_json_file(path, result);
  result["path"] = path;
  return result;
}

}  // namespace dynemb::tools

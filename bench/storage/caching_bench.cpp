// dynemb_bench_caching: the caching table (a fast table in front of the host-memory Storage)
// against its peers on one key stream, in one run (docs/storage.md, "Benchmarks"):
//
//  - find_or_insert: Zipf keys (alpha 1.05 by default) over `rows` ids, dim 128, the fast tier at
//    each --fractions of the footprint; the caching table against the CUDA table in hybrid mode
//    (the same share of the values' bytes in HBM, the rest in pinned host memory) on the same
//    batches, as drawn (repeats kept) and as each call's distinct keys. On the CPU backend the
//    peer is one CPU table holding everything.
//  - step: a training step (forward SUM pooling, backward, Adam) of an Embedding on a caching
//    table, with and without prefetch of the next batch, against the same Embedding on one table
//    holding every row (all in HBM on the GPU).
//  - lost: "nothing lost" at full size: --lost-keys distinct keys written through a fast tier of
//    --lost-fraction of the rows over HostStorage, a sample rewritten and read back; then every
//    key must be in exactly one tier with the reference model's row (exit status 1 otherwise).
//
// Prints a table and writes JSON (machine, GPU, commit, date, every parameter, the peer in the
// same run). Usage: dynemb_bench_caching [--backend cuda|cpu] [--modes find_or_insert,step,lost]
//   [--rows N] [--dim D] [--batch B] [--alpha A] [--fractions 0.1,0.5] [--calls C] [--warmup W]
//   [--streams repeats,distinct | --distinct] [--stores shared,private] [--bags B]
//   [--ids-per-bag I] [--steps S] [--step-warmup W]
//   [--lost-keys N] [--lost-dim D] [--lost-batch B]
//   [--lost-fraction F] [--no-touch] [--reserve-call-keys auto|N] [--seed S] [--json PATH]
// --reserve-call-keys: CachingOptions::max_call_keys of the caching tables (auto: the largest
// call of the mode, the batch or a step's lookups; 0: buffers grow inside the calls).
// Without --json the JSON goes to the temporary directory ($TMPDIR or /tmp), not into
// bench/results.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/table/bench_clock.hpp"
#include "bench/table/machine_info.hpp"
#include "bench/table/result_file.hpp"
#include "bench/train/zipf.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/storage/host_storage.hpp"
#include "dynemb/table/table.hpp"

namespace {

using namespace dynemb;
using Clock = std::chrono::steady_clock;
using K = int64_t;
using json = nlohmann::json;

constexpr uint64_t kAutoReserve = ~uint64_t{0};

struct Args {
  Backend backend = Backend::kCuda;
  std::vector<std::string> modes{"find_or_insert", "step", "lost"};
  uint64_t rows = 1 << 22;
  uint32_t dim = 128;
  uint64_t batch = 1 << 20;
  double alpha = 1.05;
  std::vector<double> fractions{0.1, 0.5};
  uint32_t calls = 10, warmup = 5;
  uint64_t bags = 16384;
  uint32_t ids_per_bag = 20;
  uint32_t steps = 10;
  uint32_t step_warmup =
      20;  // steps before the timed ones (the fast tier fills, new keys thin out)
  uint64_t lost_keys = 10'000'000;
  uint32_t lost_dim = 16;
  uint64_t lost_batch = 1 << 20;
  double lost_fraction = 0.01;
  uint64_t seed = 0;
  bool touch = true;  // map the host tier's memory before timing (host_tier)
  // find_or_insert streams: "repeats" (the Zipf draws as they come) and "distinct" (each call's
  // distinct keys, as a step's lookup after its dedup).
  std::vector<std::string> streams{"repeats", "distinct"};
  // Lower tiers the caching table treats as "shared" (the default) and as its own ("private":
  // CachingOptions::private_store, a filter of the keys that may be below).
  std::vector<std::string> stores{"shared", "private"};
  // CachingOptions::max_call_keys (kAutoReserve: the mode's largest call).
  uint64_t reserve_call_keys = kAutoReserve;
  std::string json_path;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidArgument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--backend") {
      a.backend = parse_backend(value());
    } else if (k == "--modes") {
      a.modes = split(value());
      for (const auto& m : a.modes)
        if (m != "find_or_insert" && m != "step" && m != "lost")
          throw InvalidArgument("--modes: \"" + m + "\" is not find_or_insert, step or lost");
    } else if (k == "--rows") {
      a.rows = std::stoull(value());
    } else if (k == "--dim") {
      a.dim = static_cast<uint32_t>(std::stoul(value()));
    } else if (k == "--batch") {
      a.batch = std::stoull(value());
    } else if (k == "--alpha") {
      a.alpha = std::stod(value());
    } else if (k == "--fractions") {
      a.fractions.clear();
      for (const auto& f : split(value())) a.fractions.push_back(std::stod(f));
    } else if (k == "--calls") {
      a.calls = static_cast<uint32_t>(std::stoul(value()));
    } else if (k == "--warmup") {
      a.warmup = static_cast<uint32_t>(std::stoul(value()));
    } else if (k == "--bags") {
      a.bags = std::stoull(value());
    } else if (k == "--ids-per-bag") {
      a.ids_per_bag = static_cast<uint32_t>(std::stoul(value()));
    } else if (k == "--step-warmup") {
      a.step_warmup = static_cast<uint32_t>(std::stoul(value()));
    } else if (k == "--steps") {
      a.steps = static_cast<uint32_t>(std::stoul(value()));
    } else if (k == "--lost-keys") {
      a.lost_keys = std::stoull(value());
    } else if (k == "--lost-dim") {
      a.lost_dim = static_cast<uint32_t>(std::stoul(value()));
    } else if (k == "--lost-batch") {
      a.lost_batch = std::stoull(value());
    } else if (k == "--lost-fraction") {
      a.lost_fraction = std::stod(value());
    } else if (k == "--no-touch") {
      a.touch = false;
    } else if (k == "--distinct") {
      a.streams = {"distinct"};
    } else if (k == "--streams") {
      a.streams = split(value());
      for (const auto& st : a.streams)
        if (st != "repeats" && st != "distinct")
          throw InvalidArgument("--streams: \"" + st + "\" is not repeats or distinct");
    } else if (k == "--stores") {
      a.stores = split(value());
      for (const auto& st : a.stores)
        if (st != "shared" && st != "private")
          throw InvalidArgument("--stores: \"" + st + "\" is not shared or private");
    } else if (k == "--reserve-call-keys") {
      const std::string v = value();
      a.reserve_call_keys = v == "auto" ? kAutoReserve : std::stoull(v);
    } else if (k == "--seed") {
      a.seed = std::stoull(value());
    } else if (k == "--json") {
      a.json_path = value();
    } else {
      throw InvalidArgument("unknown option " + k);
    }
  }
  const auto check = [](bool ok, const std::string& what) {
    if (!ok) throw InvalidArgument(what);
  };
  check(a.rows >= 1024, "--rows = " + std::to_string(a.rows) + ", must be >= 1024");
  check(a.dim >= 1 && a.dim <= 4096, "--dim = " + std::to_string(a.dim) + ", must be in [1, 4096]");
  check(a.batch >= 1, "--batch must be >= 1");
  check(a.alpha > 0 && a.alpha < 10, "--alpha must be in (0, 10)");
  for (double f : a.fractions)
    check(f > 0 && f <= 1, "--fractions: " + std::to_string(f) + " must be in (0, 1]");
  check(a.calls >= 1 && a.steps >= 1, "--calls and --steps must be >= 1");
  check(a.lost_keys >= 1 && a.lost_keys < (uint64_t{1} << 40), "--lost-keys must be in [1, 2^40)");
  check(a.lost_fraction > 0 && a.lost_fraction <= 1, "--lost-fraction must be in (0, 1]");
  if (a.seed == 0) a.seed = std::random_device{}() | 1;
  return a;
}

// The caching tables' options: `store` private or shared, calls of up to `largest_call` keys.
storage::CachingOptions caching_options(const Args& a, const std::string& store,
                                        uint64_t largest_call) {
  storage::CachingOptions o;
  o.private_store = store == "private";
  o.stage_prefetch_on_device = o.private_store;
  o.max_call_keys = a.reserve_call_keys == kAutoReserve ? largest_call : a.reserve_call_keys;
  return o;
}

uint64_t round_up(uint64_t x, uint64_t to) {
  return (x + to - 1) / to * to;
}

// An id's key: a bijection on [0, 2^40) (odd multiplier), so hot ids spread over the buckets.
constexpr uint64_t kKeyMask = (uint64_t{1} << 40) - 1;
constexpr uint64_t kKeyMul = 0x9E3779B97F4A7C15ull;
K key_of(uint64_t id) {
  return static_cast<K>((id * kKeyMul) & kKeyMask);
}
// The inverse of key_of (the multiplier's inverse modulo 2^40, by Newton's iteration).
uint64_t id_of(K key) {
  static const uint64_t inverse = [] {
    uint64_t x = kKeyMul;  // correct to 3 bits; each step doubles them
    for (int i = 0; i < 6; ++i) x *= 2 - kKeyMul * x;
    return x;
  }();
  return (static_cast<uint64_t>(key) * inverse) & kKeyMask;
}

// `count` Zipf keys over `rows` ids, drawn on several threads (one generator each).
std::vector<K> zipf_keys(const bench::ZipfSampler& zipf, size_t count, uint64_t seed) {
  std::vector<K> keys(count);
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 1000003 + t);
      for (size_t i = t; i < count; i += threads) keys[i] = key_of(zipf(rng));
    });
  }
  for (auto& th : pool) th.join();
  return keys;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void sync_stream(Backend backend) {
  if (backend == Backend::kCuda) backend_synchronize(backend);
}

// A host tier of `rows` slots, its memory mapped before timing (touch): filled to just under its
// load factor with keys outside every stream (bit 41 set), then cleared. A fresh mapping zeroes
// each page at its first write, so an untouched tier pays page faults for rows landing on new pages
// (a long run pays that once); touched, the timed calls see the tier's steady cost.
std::shared_ptr<storage::HostStorage> host_tier(uint32_t dim, uint64_t rows, bool touch) {
  auto tier = std::make_shared<storage::HostStorage>(
      storage::HostStorageOptions{dim, round_up(rows, 128), uint64_t{1} << 36, 0});
  if (!touch) return tier;
  // Just under the load factor (0.5) at which the table would grow into a fresh mapping.
  const uint64_t fill = tier->table().capacity() * 45 / 100, chunk = 1 << 16;
  std::vector<uint64_t> keys(chunk), scores(chunk, 0);
  const std::vector<float> zeros(chunk * dim, 0.0f);
  for (uint64_t first = 0; first < fill; first += chunk) {
    const size_t m = std::min(chunk, fill - first);
    for (size_t i = 0; i < m; ++i) keys[i] = (uint64_t{1} << 41) + first + i;
    tier->insert_or_assign(m, keys.data(), zeros.data(), scores.data());
  }
  tier->clear();
  return tier;
}

// The device path's host time by phase over the timed calls (CachingStats::phases at the end
// less at the end of the warm-up), in ms a device-path call (prefetch calls included).
json phases_ms(const storage::CachingPhaseTimes& end, const storage::CachingPhaseTimes& warm) {
  const uint64_t n = end.calls - warm.calls;
  const double calls = n > 0 ? double(n) : 1.0;
  const auto ms = [&](uint64_t e, uint64_t w) { return double(e - w) * 1e-6 / calls; };
  return {{"calls", n},
          {"lookup", ms(end.lookup_ns, warm.lookup_ns)},
          {"misses", ms(end.misses_ns, warm.misses_ns)},
          {"lower_read", ms(end.lower_read_ns, warm.lower_read_ns)},
          {"insert", ms(end.insert_ns, warm.insert_ns)},
          {"evicted", ms(end.evicted_ns, warm.evicted_ns)},
          {"write_down", ms(end.write_down_ns, warm.write_down_ns)},
          {"outputs", ms(end.outputs_ns, warm.outputs_ns)},
          {"total", ms(end.total_ns, warm.total_ns)}};
}

std::string phases_line(const json& p) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << "    ms a call (" << p["calls"] << " calls): lookup "
    << p["lookup"].get<double>() << ", misses " << p["misses"].get<double>() << ", lower read "
    << p["lower_read"].get<double>() << ", insert " << p["insert"].get<double>() << ", evicted "
    << p["evicted"].get<double>() << ", write down " << p["write_down"].get<double>()
    << ", outputs " << p["outputs"].get<double>() << ", total " << p["total"].get<double>() << "\n";
  return o.str();
}

// --- find_or_insert: caching against hybrid ---------------------------------------------------

// keys_per_second is the timed calls' keys over their summed time, so one slow call weighs in
// with its whole time: a call that takes a path the warm-up did not (a private store's first
// misses listed on the host) grows that path's pinned host rows and scratch inside the timed
// window (docs/storage.md, "Benchmarks"); the median call's rate and the slowest call show it.
struct Timed {
  std::vector<double> seconds;      // per timed call
  std::vector<uint64_t> call_keys;  // per timed call
  uint64_t keys = 0;                // keys of the timed calls
  // Keys of the timed calls over their time.
  double keys_per_second() const {
    double total = 0;
    for (const double x : seconds) total += x;
    return total > 0 ? double(keys) / total : 0.0;
  }
  // The median of the calls' own rates.
  double median_call_keys_per_second() const {
    std::vector<double> rates;
    for (size_t c = 0; c < seconds.size(); ++c)
      if (seconds[c] > 0) rates.push_back(double(call_keys[c]) / seconds[c]);
    if (rates.empty()) return 0.0;
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
  }
  double slowest_call_seconds() const {
    return seconds.empty() ? 0.0 : *std::max_element(seconds.begin(), seconds.end());
  }
};

// Runs warmup + timed find_or_insert calls of every batch on `table` (`warmed` after the
// warm-up, when given).
Timed time_find_or_insert(Table<K>& table, Backend backend,
                          const std::vector<BackendBuffer<K>>& batches,
                          const std::vector<uint64_t>& sizes, uint32_t warmup,
                          BackendBuffer<float>& values, BackendBuffer<bool>& founds,
                          StreamHandle stream, const std::function<void()>& warmed = {}) {
  Timed t;
  for (size_t b = 0; b < batches.size(); ++b) {
    if (b == warmup && warmed) warmed();
    const auto start = Clock::now();
    table.find_or_insert(sizes[b], batches[b].data(), values.data(), founds.data(), nullptr,
                         stream);
    sync_stream(backend);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (b >= warmup) {
      t.seconds.push_back(s);
      t.call_keys.push_back(sizes[b]);
      t.keys += sizes[b];
    }
    table.advance_step();
  }
  return t;
}

json run_find_or_insert(const Args& a, StreamHandle stream, bool distinct) {
  std::cerr << "find_or_insert: " << a.warmup + a.calls << " batches of " << a.batch << " Zipf("
            << a.alpha << ") keys over " << a.rows << " ids\n";
  const bench::ZipfSampler zipf(a.rows, a.alpha);
  std::vector<BackendBuffer<K>> batches;
  std::vector<uint64_t> batch_sizes;
  for (uint32_t b = 0; b < a.warmup + a.calls; ++b) {
    std::vector<K> keys = zipf_keys(zipf, a.batch, a.seed + b);
    if (distinct) {  // each batch's distinct keys, in a random order
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      std::shuffle(keys.begin(), keys.end(), std::mt19937_64(a.seed + b));
    }
    batch_sizes.push_back(keys.size());
    batches.emplace_back(a.backend, keys.size());
    batches.back().upload(keys.data(), keys.size());
  }
  BackendBuffer<float> values(a.backend, a.batch * a.dim);
  BackendBuffer<bool> founds(a.backend, a.batch);
  json cells = json::array();
  for (const double f : a.fractions) {
    json cell{{"fraction", f}};
    const uint64_t fast_rows = round_up(std::max<uint64_t>(uint64_t(f * double(a.rows)), 128), 128);
    for (const std::string& store : a.stores) {
      TableOptions fast;
      fast.dim = a.dim;
      fast.init_capacity = fast.max_capacity = fast_rows;
      fast.max_load_factor = 1.0;
      fast.score_policy = ScorePolicy::kStep;
      auto lower = host_tier(a.dim, 2 * a.rows, a.touch);  // every id fits under load 0.5
      storage::CachedTable<K> cached(a.backend, fast, lower, caching_options(a, store, a.batch));
      storage::CachingStats warm{};  // at the end of the warm-up
      const Timed t = time_find_or_insert(cached, a.backend, batches, batch_sizes, a.warmup, values,
                                          founds, stream, [&] { warm = cached.caching_stats(); });
      const storage::CachingStats s = cached.caching_stats();
      cell[store == "private" ? "caching_private_store" : "caching"] = {
          {"fast_rows", fast_rows},
          {"private_store", store == "private"},
          {"keys_per_second", t.keys_per_second()},
          {"median_call_keys_per_second", t.median_call_keys_per_second()},
          {"slowest_call_seconds", t.slowest_call_seconds()},
          {"seconds", t.seconds},
          {"staged_calls", s.staged_calls - warm.staged_calls},  // of the timed calls
          {"staged_call_fallbacks", s.staged_call_fallbacks - warm.staged_call_fallbacks},
          {"buffer_growths", s.buffer_growths - warm.buffer_growths},  // in the timed calls
          {"buffer_growths_in_warmup", warm.buffer_growths},
          {"lookups", s.lookups},
          {"hits", s.hits},
          {"rows_up", s.rows_up},
          {"rows_down", s.rows_down},
          {"new_rows", s.new_rows},
          {"filtered", s.filtered},
          {"lower_wait_s", double(s.lower_wait_ns) * 1e-9},
          {"lower_evicted", s.lower.evicted},
          {"phases_ms_per_call", phases_ms(s.phases, warm.phases)},
          {"rows", cached.size()}};
    }
    {
      TableOptions t;
      t.dim = a.dim;
      t.init_capacity = t.max_capacity = round_up(a.rows * 2, 128);
      t.max_load_factor = 1.0;
      t.score_policy = ScorePolicy::kStep;
      std::string peer = "hybrid";
      if (a.backend == Backend::kCuda) {
        t.max_hbm_for_values = uint64_t(f * double(a.rows)) * a.dim * sizeof(float);
      } else {
        peer = "cpu_table";  // no hybrid mode on the CPU: one table holding everything
      }
      auto table = make_table<K>(a.backend, t);
      const Timed tm = time_find_or_insert(*table, a.backend, batches, batch_sizes, a.warmup,
                                           values, founds, stream);
      cell["peer"] = {
          {"kind", peer},
          {"capacity", t.init_capacity},
          {"hbm_bytes_for_values", a.backend == Backend::kCuda ? t.max_hbm_for_values : 0},
          {"keys_per_second", tm.keys_per_second()},
          {"median_call_keys_per_second", tm.median_call_keys_per_second()},
          {"slowest_call_seconds", tm.slowest_call_seconds()},
          {"seconds", tm.seconds},
          {"evictions", table->stats().evictions},
          {"rows", table->size(stream)}};
    }
    const double p = cell["peer"]["keys_per_second"];
    for (const char* name : {"caching", "caching_private_store"}) {
      if (!cell.contains(name)) continue;
      const double c = cell[name]["keys_per_second"];
      cell[std::string(name) + "_over_peer"] = p > 0 ? c / p : 0.0;
    }
    cells.push_back(cell);
  }
  return cells;
}

// --- the training step --------------------------------------------------------------------------

struct StepBatch {
  BackendBuffer<K> keys;
  BackendBuffer<int64_t> offsets;
  BackendBuffer<K> distinct;  // the batch's distinct keys (what its step looks up; prefetched)
  size_t num_distinct = 0;
};

json run_step(const Args& a, StreamHandle stream) {
  const uint64_t n = a.bags * a.ids_per_bag;
  std::cerr << "step: " << a.step_warmup + a.steps << " steps of " << a.bags << " bags x "
            << a.ids_per_bag << " ids, Zipf(" << a.alpha << ") over " << a.rows << " ids\n";
  const bench::ZipfSampler zipf(a.rows, a.alpha);
  std::vector<int64_t> offsets(a.bags + 1);
  for (uint64_t b = 0; b <= a.bags; ++b) offsets[b] = int64_t(b * a.ids_per_bag);
  std::vector<StepBatch> batches;
  for (uint32_t s = 0; s < a.step_warmup + a.steps + 1; ++s) {
    const std::vector<K> keys = zipf_keys(zipf, n, a.seed + 7919 + s);
    std::vector<K> distinct = keys;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    StepBatch b{BackendBuffer<K>(a.backend, n), BackendBuffer<int64_t>(a.backend, a.bags + 1),
                BackendBuffer<K>(a.backend, distinct.size()), distinct.size()};
    b.keys.upload(keys.data(), n);
    b.offsets.upload(offsets.data(), offsets.size());
    b.distinct.upload(distinct.data(), distinct.size());
    batches.push_back(std::move(b));
  }
  std::vector<float> grad(a.bags * a.dim);
  std::mt19937_64 rng(a.seed);
  for (float& g : grad) g = std::uniform_real_distribution<float>(-1, 1)(rng);
  BackendBuffer<float> dgrad(a.backend, grad.size()), out(a.backend, grad.size());
  dgrad.upload(grad.data(), grad.size());

  EmbeddingOptions o;
  o.dim = a.dim;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.optimizer.learning_rate = 0.01f;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.init_capacity = o.table.max_capacity = round_up(a.rows * 2, 128);
  o.table.max_load_factor = 1.0;
  const uint32_t row_dim = embedding_row_dim(o);

  // With prefetch, the next batch is brought up once the step is issued.
  storage::CachingStats warm{};  // the caching table's counts after the warm-up steps
  const auto run = [&](Embedding<K>& emb, storage::CachedTable<K>* cached, bool prefetch) {
    std::vector<double> seconds;
    for (uint32_t s = 0; s < a.step_warmup + a.steps; ++s) {
      if (s == a.step_warmup && cached != nullptr) warm = cached->caching_stats();
      const StepBatch& b = batches[s];
      const auto start = Clock::now();
      emb.forward({b.keys.data(), n, b.offsets.data(), a.bags, nullptr, PoolingMode::kSum},
                  out.data(), a.dim, true, stream);
      emb.backward(dgrad.data(), a.dim, stream);
      // The next batch's keys are ready (uploaded before the loop): the prefetch waits for
      // nothing on `stream` and overlaps the step issued there.
      // The next batch's distinct keys (deduplicated when the batch was made) come up, new keys
      // get their rows there too, so the next step's lookup reads nothing back (prefetch_step).
      if (prefetch && cached != nullptr) {
        const StepBatch& next = batches[s + 1];
        cached->prefetch_step(next.num_distinct, next.distinct.data());
      }
      emb.end_step();
      sync_stream(a.backend);
      const double t = std::chrono::duration<double>(Clock::now() - start).count();
      if (s >= a.step_warmup) seconds.push_back(t);
    }
    return seconds;
  };
  json result{{"row_dim", row_dim}, {"lookups_per_step", n}};
  {
    Embedding<K> big(a.backend, o);
    const auto s = run(big, nullptr, false);
    result["all_in_fast_memory"] = {{"step_seconds", median(s)}, {"seconds", s}};
  }
  json cells = json::array();
  for (const double f : a.fractions) {
    for (const auto& [prefetch, store] :
         {std::pair<bool, std::string>{true, "shared"}, {true, "private"}, {false, "shared"}}) {
      if (std::find(a.stores.begin(), a.stores.end(), store) == a.stores.end()) continue;
      const uint64_t fast_rows =
          round_up(std::max<uint64_t>(uint64_t(f * double(a.rows)), 128), 128);
      storage::CachedTable<K>* cached = nullptr;
      Embedding<K> emb(a.backend, o, [&](Backend backend, const TableOptions& t) {
        TableOptions fast = t;
        fast.init_capacity = fast.max_capacity = fast_rows;
        fast.max_load_factor = 1.0;
        // Sized for half the ids (it grows, doubling, if more rows come down).
        auto lower = host_tier(t.dim, a.rows / 2, a.touch);
        auto table = std::make_unique<storage::CachedTable<K>>(backend, fast, lower,
                                                               caching_options(a, store, n));
        cached = table.get();
        return table;
      });
      const auto s = run(emb, cached, prefetch);
      const storage::CachingStats st = cached->caching_stats();
      const double big = result["all_in_fast_memory"]["step_seconds"];
      cells.push_back({{"fraction", f},
                       {"prefetch", prefetch},
                       {"private_store", store == "private"},
                       {"fast_rows", fast_rows},
                       {"step_seconds", median(s)},
                       {"seconds", s},
                       {"over_all_in_fast_memory", big > 0 ? median(s) / big : 0.0},
                       {"hits", st.hits},
                       {"lookups", st.lookups},
                       {"prefetched", st.prefetched},
                       {"rows_up", st.rows_up},
                       {"rows_down", st.rows_down},
                       {"batch_evicted", st.batch_evicted},
                       {"new_rows", st.new_rows},
                       {"filtered", st.filtered},
                       {"unsynced_calls", st.unsynced_calls},
                       {"staged_prefetches", st.staged_prefetches},
                       {"staged_fallbacks", st.staged_fallbacks},
                       {"unserved", st.unserved},
                       {"rows_down", st.rows_down},
                       {"buffer_growths", st.buffer_growths - warm.buffer_growths},  // timed
                       {"phases_ms_per_call", phases_ms(st.phases, warm.phases)},
                       {"lower_wait_s", double(st.lower_wait_ns) * 1e-9}});
    }
  }
  result["caching"] = cells;
  return result;
}

// --- nothing lost ------------------------------------------------------------------------------

// The reference row of a key at version v (exact in float32).
float reference(K key, uint32_t version, uint32_t c) {
  const uint64_t x = static_cast<uint64_t>(key) * 31 + c * 7 + version * 1000003ull;
  return static_cast<float>(x % 65536) / 256.0f;
}

json run_lost(const Args& a, StreamHandle stream) {
  const uint64_t n = a.lost_keys;
  const uint32_t dim = a.lost_dim;
  const uint64_t fast_rows =
      round_up(std::max<uint64_t>(uint64_t(a.lost_fraction * double(n)), 128), 128);
  std::cerr << "lost: " << n << " distinct keys, dim " << dim << ", fast tier " << fast_rows
            << " rows\n";
  TableOptions fast;
  fast.dim = dim;
  fast.init_capacity = fast.max_capacity = fast_rows;
  fast.max_load_factor = 1.0;
  fast.score_policy = ScorePolicy::kStep;
  auto lower = std::make_shared<storage::HostStorage>(
      storage::HostStorageOptions{dim, round_up(n + n / 2, 128), uint64_t{1} << 36, 0});
  storage::CachedTable<K> cached(a.backend, fast, lower);
  std::vector<uint8_t> version(n, 0);
  const uint64_t b = std::min(a.lost_batch, n);
  BackendBuffer<K> dkeys(a.backend, b);
  BackendBuffer<float> dvals(a.backend, b * dim);
  BackendBuffer<bool> dfound(a.backend, b);
  std::vector<K> keys(b);
  std::vector<float> vals(b * dim);
  // given: find_or_insert_given (new keys take the rows: the caching table's device path);
  // else insert_or_assign (rewrites).
  const auto write = [&](size_t m, bool given) {
    for (size_t i = 0; i < m; ++i) {
      const uint8_t v = ++version[id_of(keys[i])];
      for (uint32_t c = 0; c < dim; ++c) vals[i * dim + c] = reference(keys[i], v, c);
    }
    dkeys.upload(keys.data(), m);
    dvals.upload(vals.data(), m * dim);
    if (given) {
      cached.find_or_insert_given(m, dkeys.data(), dvals.data(), dfound.data(), nullptr, stream);
    } else {
      cached.insert_or_assign(m, dkeys.data(), dvals.data(), nullptr, stream);
    }
    cached.advance_step();
  };
  const auto start = Clock::now();
  // Pass 1: every key once, in order.
  for (uint64_t first = 0; first < n; first += b) {
    const size_t m = std::min(b, n - first);
    for (size_t i = 0; i < m; ++i) keys[i] = key_of(first + i);
    write(m, true);
  }
  // Pass 2: random keys rewritten (distinct within a batch: one per stride).
  std::mt19937_64 rng(a.seed);
  const uint64_t rewrites = std::max<uint64_t>(1, std::min<uint64_t>(4, n / b));
  for (uint64_t r = 0; r < rewrites; ++r) {
    const uint64_t stride = n / b + 1;
    size_t m = 0;
    for (uint64_t id = rng() % stride; id < n && m < b; id += stride) keys[m++] = key_of(id);
    write(m, false);
  }
  // Pass 3: random keys read back through find_or_insert (they move up); values checked.
  uint64_t read_mismatches = 0, read_missing = 0;
  {
    size_t m = std::min<uint64_t>(b, n);
    for (size_t i = 0; i < m; ++i) keys[i] = key_of(rng() % n);
    std::sort(keys.begin(), keys.begin() + m);
    m = std::unique(keys.begin(), keys.begin() + m) - keys.begin();
    dkeys.upload(keys.data(), m);
    cached.find_or_insert(m, dkeys.data(), dvals.data(), dfound.data(), nullptr, stream);
    std::unique_ptr<bool[]> found(new bool[m]);
    dvals.download(vals.data(), m * dim);
    dfound.download(found.get(), m);
    for (size_t i = 0; i < m; ++i) {
      if (!found[i]) ++read_missing;
      for (uint32_t c = 0; c < dim; ++c)
        if (vals[i * dim + c] != reference(keys[i], version[id_of(keys[i])], c)) {
          ++read_mismatches;
          break;
        }
    }
  }
  const double stream_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Every key in exactly one tier, with its reference row.
  std::vector<uint8_t> seen(n, 0);
  uint64_t foreign = 0, mismatches = 0, fast_count = 0, lower_count = 0;
  const auto check = [&](K key, const float* row, uint8_t tier) {
    const uint64_t id = id_of(key);
    if (id >= n) {
      ++foreign;
      return;
    }
    seen[id] |= tier;
    if (seen[id] == 3) return;  // in both tiers: counted below
    for (uint32_t c = 0; c < dim; ++c)
      if (row[c] != reference(key, version[id], c)) {
        if (++mismatches <= 5) {
          std::cerr << "mismatch: key " << key << " (id " << id << ") in the "
                    << (tier == 1 ? "fast tier" : "lower tier") << ", version " << int(version[id])
                    << ", element " << c << ": " << row[c]
                    << " != " << reference(key, version[id], c)
                    << " (version 1: " << reference(key, 1, c) << ")\n";
        }
        return;
      }
  };
  cached.fast_table().for_each([&](K key, std::span<const float> row, uint64_t) {
    ++fast_count;
    check(key, row.data(), 1);
  });
  {
    storage::ScanCursor cursor;
    const size_t chunk = 1 << 16;
    std::vector<uint64_t> sk(chunk), ss(chunk);
    std::vector<float> sv(chunk * dim);
    while (!cursor.done()) {
      const size_t got = lower->scan(cursor, chunk, sk.data(), sv.data(), ss.data());
      for (size_t i = 0; i < got; ++i) {
        ++lower_count;
        check(static_cast<K>(sk[i]), sv.data() + i * dim, 2);
      }
    }
  }
  uint64_t in_both = 0, in_none = 0;
  for (uint64_t id = 0; id < n; ++id) {
    in_both += seen[id] == 3;
    in_none += seen[id] == 0;
  }
  const storage::CachingStats st = cached.caching_stats();
  const bool ok = in_both == 0 && in_none == 0 && foreign == 0 && mismatches == 0 &&
                  read_mismatches == 0 && read_missing == 0 && st.lower.evicted == 0;
  return {{"keys", n},
          {"dim", dim},
          {"batch", b},
          {"fast_rows", fast_rows},
          {"rewrite_batches", rewrites},
          {"stream_seconds", stream_seconds},
          {"in_fast", fast_count},
          {"in_lower", lower_count},
          {"in_both", in_both},
          {"in_none", in_none},
          {"foreign", foreign},
          {"value_mismatches", mismatches},
          {"read_back_mismatches", read_mismatches},
          {"read_back_missing", read_missing},
          {"lower_evicted", st.lower.evicted},
          {"evictions_written", st.evictions_written},
          {"rows_up", st.rows_up},
          {"rows_down", st.rows_down},
          {"ok", ok}};
}

std::string fmt(double v, int precision = 2) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << v;
  return s.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  std::cerr << "seed " << a.seed << "\n";
  auto clock = bench::make_bench_clock(a.backend, 0);
  const StreamHandle stream = clock->stream();
  json result{{"benchmark", "caching"},
              {"date", bench::utc_now_iso8601()},
              {"commit", bench::git_commit(DYNEMB_SOURCE_DIR)},
              {"backend", to_string(a.backend)},
              {"params",
               {{"rows", a.rows},
                {"dim", a.dim},
                {"batch", a.batch},
                {"alpha", a.alpha},
                {"fractions", a.fractions},
                {"calls", a.calls},
                {"warmup", a.warmup},
                {"bags", a.bags},
                {"ids_per_bag", a.ids_per_bag},
                {"steps", a.steps},
                {"step_warmup", a.step_warmup},
                {"host_tier_touched_before_timing", a.touch},
                {"optimizer", "adam"},
                {"score_policy", "step"},
                {"lower_tier", "HostStorage"},
                {"lost_keys", a.lost_keys},
                {"lost_dim", a.lost_dim},
                {"lost_batch", a.lost_batch},
                {"lost_fraction", a.lost_fraction},
                {"find_or_insert_streams", a.streams},
                {"stores", a.stores},
                {"reserve_call_keys",
                 a.reserve_call_keys == kAutoReserve ? json("auto") : json(a.reserve_call_keys)},
                {"seed", a.seed}}}};
  const bench::MachineInfo m = bench::query_machine_info();
  result["machine"] = {{"hostname", m.hostname},
                       {"cpu", m.cpu_model},
                       {"cores", m.cores},
                       {"memory_bytes", m.memory_bytes}};
  if (const auto gpu = bench::query_gpu_info(0); gpu && a.backend == Backend::kCuda)
    result["gpu"] = {{"name", gpu->name}, {"memory_bytes", gpu->memory_bytes}};
  const auto wants = [&](const char* mode) {
    return std::find(a.modes.begin(), a.modes.end(), mode) != a.modes.end();
  };
  bool ok = true;
  for (const std::string& kind : a.streams) {
    if (!wants("find_or_insert")) break;
    const bool distinct = kind == "distinct";
    const std::string name = distinct ? "find_or_insert_distinct" : "find_or_insert";
    result[name] = run_find_or_insert(a, stream, distinct);
    std::cout << "find_or_insert, dim " << a.dim << ", " << a.batch << " Zipf " << a.alpha
              << " draws over " << a.rows << " ids a call"
              << (distinct ? " (each call: their distinct keys)" : " (repeats kept)")
              << " (M keys/s over the timed calls)\n"
              << "  fraction  caching  peer(" << result[name][0]["peer"]["kind"].get<std::string>()
              << ")  ratio  hit-rate  rows-up/call  lower-tier-s/call  call-s\n";
    const double calls = a.warmup + a.calls;  // the stats count warm-up calls too
    for (const auto& c : result[name]) {
      for (const char* v : {"caching", "caching_private_store"}) {
        if (!c.contains(v)) continue;
        const double hits = c[v]["hits"], lookups = c[v]["lookups"];
        std::cout << "  " << fmt(c["fraction"]) << "      "
                  << fmt(c[v]["keys_per_second"].get<double>() / 1e6, 1) << "     "
                  << fmt(c["peer"]["keys_per_second"].get<double>() / 1e6, 1) << "     "
                  << fmt(c[std::string(v) + "_over_peer"]) << "x  "
                  << fmt(lookups > 0 ? hits / lookups : 0, 3) << "  "
                  << c[v]["rows_up"].get<double>() / calls << "  "
                  << fmt(c[v]["lower_wait_s"].get<double>() / calls, 4) << "  "
                  << fmt(median(c[v]["seconds"].get<std::vector<double>>()), 4)
                  << (std::string(v) == "caching" ? "  (shared store)" : "  (private store)")
                  << "\n    median call "
                  << fmt(c[v]["median_call_keys_per_second"].get<double>() / 1e6, 1)
                  << " M keys/s (peer "
                  << fmt(c["peer"]["median_call_keys_per_second"].get<double>() / 1e6, 1)
                  << "), slowest call " << fmt(c[v]["slowest_call_seconds"].get<double>() * 1e3)
                  << " ms, timed calls staged on the device " << c[v]["staged_calls"] << " ("
                  << c[v]["staged_call_fallbacks"] << " listed on the host after trying), "
                  << c[v]["buffer_growths"] << " buffer growths in them\n"
                  << phases_line(c[v]["phases_ms_per_call"]);
      }
    }
  }
  if (wants("step")) {
    result["step"] = run_step(a, stream);
    const auto& s = result["step"];
    std::cout << "training step, " << s["lookups_per_step"] << " lookups, dim " << a.dim
              << ", Adam: all in fast memory "
              << fmt(s["all_in_fast_memory"]["step_seconds"].get<double>() * 1e3) << " ms\n"
              << "  fraction  prefetch  step(ms)  over-all-in-fast\n";
    const double steps = a.step_warmup + a.steps;  // the stats count warm-up steps too
    for (const auto& c : s["caching"]) {
      std::cout << "  " << fmt(c["fraction"]) << "      "
                << (c["prefetch"].get<bool>() ? "yes" : "no ")
                << (c["private_store"].get<bool>() ? " (private)" : " (shared) ") << "  "
                << fmt(c["step_seconds"].get<double>() * 1e3) << "     "
                << fmt(c["over_all_in_fast_memory"]) << "x  rows up/down/new a step "
                << c["rows_up"].get<double>() / steps << " / "
                << c["rows_down"].get<double>() / steps << " / "
                << c["new_rows"].get<double>() / steps << ", lower tier "
                << fmt(c["lower_wait_s"].get<double>() / steps * 1e3) << " ms a step, "
                << c["unsynced_calls"] << " lookups without a sync, " << c["staged_prefetches"]
                << " prefetches staged on the device (" << c["staged_fallbacks"] << " fell back), "
                << c["buffer_growths"] << " buffer growths in the timed steps\n"
                << phases_line(c["phases_ms_per_call"]);
    }
  }
  if (wants("lost")) {
    result["lost"] = run_lost(a, stream);
    const auto& l = result["lost"];
    ok = l["ok"].get<bool>();
    std::cout << "nothing lost: " << l["keys"] << " keys, fast tier " << l["fast_rows"]
              << " rows: in fast " << l["in_fast"] << ", below " << l["in_lower"] << ", both "
              << l["in_both"] << ", none " << l["in_none"] << ", value mismatches "
              << l["value_mismatches"] << ", read-back mismatches " << l["read_back_mismatches"]
              << " (" << fmt(l["stream_seconds"].get<double>(), 1) << " s) -> "
              << (ok ? "OK" : "FAILED") << "\n";
  }
  // The bars, against what this run measured (met or not, stated as measured).
  json bars = json::array();
  for (const char* name : {"find_or_insert", "find_or_insert_distinct"}) {
    if (!result.contains(name)) continue;
    for (const auto& c : result[name]) {
      for (const char* v : {"caching", "caching_private_store"}) {
        if (!c.contains(v)) continue;
        const double ratio = c[std::string(v) + "_over_peer"];
        bars.push_back({{"bar", "caching find_or_insert >= 5x the peer"},
                        {"stream", std::string(name) == "find_or_insert" ? "repeats" : "distinct"},
                        {"store", std::string(v) == "caching" ? "shared" : "private"},
                        {"fraction", c["fraction"]},
                        {"peer", c["peer"]["kind"]},
                        {"measured", ratio},
                        {"met", ratio >= 5.0}});
      }
    }
  }
  if (result.contains("step")) {
    for (const auto& c : result["step"]["caching"]) {
      if (!c["prefetch"].get<bool>()) continue;
      const double ratio = c["over_all_in_fast_memory"];
      bars.push_back({{"bar", "step with prefetch <= 1.3x the step with every row in fast memory"},
                      {"store", c["private_store"].get<bool>() ? "private" : "shared"},
                      {"fraction", c["fraction"]},
                      {"measured", ratio},
                      {"met", ratio <= 1.3}});
    }
  }
  result["bars"] = bars;
  for (const auto& b : bars) {
    std::cout << "bar: " << b["bar"].get<std::string>() << " (fraction " << fmt(b["fraction"])
              << (b.contains("stream") ? ", " + b["stream"].get<std::string>() : std::string())
              << ", " << b["store"].get<std::string>() << " store"
              << "): measured " << fmt(b["measured"]) << "x, "
              << (b["met"].get<bool>() ? "met" : "NOT met") << "\n";
  }
  // Outside the repository unless asked (--json): a result is committed on purpose, by name
  // (bench/results/README.md), never left behind by a trial run.
  const std::string path = !a.json_path.empty() ? a.json_path
                                                : (std::filesystem::temp_directory_path() /
                                                   ("dynemb-caching-" + to_string(a.backend) + "-" +
                                                    bench::machine_label(m.hostname) + ".json"))
                                                      .string();
  bench::write_json_file(path, result);
  std::cout << "wrote " << path << "\n";
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "dynemb_bench_caching: " << e.what() << "\n";
  return 2;
}

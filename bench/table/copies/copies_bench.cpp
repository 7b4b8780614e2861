// The CUDA table's writes on batches that repeat keys: a batch of Zipf(s) draws over `ids` ids
// (the hot ids repeated thousands of times, as raw training batches are), and the same batch's
// distinct keys, in three modes (docs/cuda_table.md "Copies of a key in one call"):
//   coalesce  TableOptions::coalesce_copies_min_batch 2^14: one op per distinct key after an
//             owner search and a host synchronization (the hybrid default);
//   joins     no owner search, join_contended_copies on: copies meeting at a taken bucket lock
//             take the claimer's result (the HBM-only default);
//   per-copy  neither: every copy takes its bucket lock.
// Prints M keys/s per cell (keys of the batch, copies included) and writes JSON.
//
// Usage: dynemb_bench_copies [--dim 64] [--capacity N] [--hbm-budget-gb G] [--batch 262144]
//                            [--ids 2097152] [--zipf 1.05] [--repeats 3] [--seed N]
//                            [--modes coalesce,joins,per-copy] [--json F]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/table/bench_clock.hpp"
#include "bench/table/machine_info.hpp"
#include "bench/table/result_file.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"

namespace {

using dynemb::Backend;
using dynemb::BackendBuffer;

struct Params {
  uint32_t dim = 64;
  uint64_t capacity = uint64_t{1} << 26;
  double hbm_budget_gb = 0;  // 0: every row in HBM
  uint64_t batch = uint64_t{1} << 18;
  uint64_t ids = uint64_t{1} << 21;
  double zipf = 1.05;
  uint32_t repeats = 3;
  uint64_t seed = 0;
  std::vector<std::string> modes{"coalesce", "joins", "per-copy"};
  std::string json_path;
};

Params parse(int argc, char** argv) {
  Params p;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--dim")
      p.dim = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--capacity")
      p.capacity = std::stoull(v);
    else if (a == "--hbm-budget-gb")
      p.hbm_budget_gb = std::stod(v);
    else if (a == "--batch")
      p.batch = std::stoull(v);
    else if (a == "--ids")
      p.ids = std::stoull(v);
    else if (a == "--zipf")
      p.zipf = std::stod(v);
    else if (a == "--repeats")
      p.repeats = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--seed")
      p.seed = std::stoull(v);
    else if (a == "--json")
      p.json_path = v;
    else if (a == "--modes") {
      p.modes.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        const std::string mode = v.substr(at, comma - at);
        if (mode != "coalesce" && mode != "joins" && mode != "per-copy")
          throw std::invalid_argument("--modes: unknown mode '" + mode +
                                      "' (coalesce, joins, per-copy)");
        p.modes.push_back(mode);
        at = comma + 1;
      }
    } else
      throw std::invalid_argument("unknown option " + a);
  }
  if (p.batch == 0 || p.ids == 0 || p.repeats == 0 || p.zipf <= 0)
    throw std::invalid_argument("--batch, --ids, --repeats and --zipf must be > 0");
  if (p.capacity % 128 != 0) throw std::invalid_argument("--capacity must be a multiple of 128");
  return p;
}

// Key of id `i`: a bijective mix, never reserved for ids < 2^63.
uint64_t key_of(uint64_t i) {
  uint64_t z = i + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) >> 1;
}

// `batch` Zipf(s) draws over ids [0, ids): P(id k) proportional to 1 / (k + 1)^s.
std::vector<uint64_t> zipf_batch(const Params& p, std::mt19937_64& rng) {
  std::vector<double> cdf(p.ids);
  double sum = 0;
  for (uint64_t k = 0; k < p.ids; ++k) cdf[k] = sum += std::pow(double(k + 1), -p.zipf);
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<uint64_t> keys(p.batch);
  for (uint64_t& key : keys) {
    const auto it = std::lower_bound(cdf.begin(), cdf.end(), u(rng));
    key = key_of(static_cast<uint64_t>(std::min<ptrdiff_t>(it - cdf.begin(), p.ids - 1)));
  }
  return keys;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Cell {
  std::string op, batch_kind;
  std::string mode;
  uint64_t keys = 0;
  double mkeys_per_s = 0;
};

// Times `call` (best of repeats, each preceded by `reset`), in M keys/s of n keys.
template <class Reset, class Call>
double time_best(uint32_t repeats, uint64_t n, Reset reset, Call call) {
  double best = std::numeric_limits<double>::infinity();
  for (uint32_t r = 0; r < repeats; ++r) {
    reset();
    check(cudaDeviceSynchronize(), "sync");
    const auto t0 = std::chrono::steady_clock::now();
    call();
    check(cudaDeviceSynchronize(), "sync");
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return double(n) / best / 1e6;
}

std::vector<Cell> run(const Params& p, const std::string& mode, const std::vector<uint64_t>& zipf,
                      const std::vector<uint64_t>& distinct) {
  dynemb::TableOptions o;
  o.dim = p.dim;
  o.bucket_capacity = 128;
  o.init_capacity = o.max_capacity = p.capacity;
  o.score_policy = dynemb::ScorePolicy::kTimestamp;
  o.safe_check = dynemb::SafeCheck::kIgnore;
  if (p.hbm_budget_gb > 0)
    o.max_hbm_for_values = static_cast<uint64_t>(p.hbm_budget_gb * double(uint64_t{1} << 30));
  o.coalesce_copies_min_batch =
      mode == "coalesce" ? uint64_t{1} << 14 : std::numeric_limits<uint64_t>::max();
  o.join_contended_copies = mode != "per-copy";
  auto table = dynemb::make_table<uint64_t>(Backend::kCuda, o);

  std::vector<Cell> cells;
  for (const bool repeats_keys : {true, false}) {
    const std::vector<uint64_t>& host = repeats_keys ? zipf : distinct;
    const uint64_t n = host.size();
    BackendBuffer<uint64_t> keys(Backend::kCuda, n);
    keys.upload(host.data(), n);
    BackendBuffer<uint64_t> unique(Backend::kCuda, distinct.size());
    unique.upload(distinct.data(), distinct.size());
    BackendBuffer<float> values(Backend::kCuda, n * p.dim);
    check(cudaMemset(values.data(), 0, n * p.dim * sizeof(float)), "memset");
    BackendBuffer<bool> founds(Backend::kCuda, n);
    BackendBuffer<float*> ptrs(Backend::kCuda, n);
    const auto erase_all = [&] { table->erase(distinct.size(), unique.data()); };
    const auto store_all = [&] {
      table->insert_or_assign(distinct.size(), unique.data(), values.data());
    };
    const std::string kind = repeats_keys ? "zipf" : "distinct";
    const auto add = [&](const char* op, double rate) {
      cells.push_back({op, kind, mode, n, rate});
      std::printf("%-8s %-9s %-34s %-8s %9llu %10.2f\n", p.hbm_budget_gb > 0 ? "hybrid" : "hbm",
                  mode.c_str(), op, kind.c_str(), static_cast<unsigned long long>(n), rate);
      std::fflush(stdout);
    };
    add("find_or_insert (keys new)", time_best(p.repeats, n, erase_all, [&] {
          table->find_or_insert(n, keys.data(), values.data(), founds.data());
        }));
    add("find_or_insert (keys stored)", time_best(p.repeats, n, store_all, [&] {
          table->find_or_insert(n, keys.data(), values.data(), founds.data());
        }));
    add("find_or_insert_pointers (new)", time_best(p.repeats, n, erase_all, [&] {
          table->find_or_insert_pointers(n, keys.data(), ptrs.data(), founds.data());
        }));
    add("insert_or_assign (keys new)", time_best(p.repeats, n, erase_all, [&] {
          table->insert_or_assign(n, keys.data(), values.data());
        }));
    add("assign (keys stored)",
        time_best(p.repeats, n, store_all, [&] { table->assign(n, keys.data(), values.data()); }));
  }
  return cells;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Params p = parse(argc, argv);
    if (p.seed == 0) p.seed = std::random_device{}();
    std::printf("seed %llu\n", static_cast<unsigned long long>(p.seed));
    std::mt19937_64 rng(p.seed);
    const std::vector<uint64_t> zipf = zipf_batch(p, rng);
    std::vector<uint64_t> distinct;
    {
      std::unordered_set<uint64_t> seen;
      for (const uint64_t k : zipf)
        if (seen.insert(k).second) distinct.push_back(k);
    }
    std::printf(
        "batch %llu Zipf(%.2f) draws over %llu ids: %zu distinct keys; dim %u, capacity "
        "%llu, %s\n",
        static_cast<unsigned long long>(p.batch), p.zipf, static_cast<unsigned long long>(p.ids),
        distinct.size(), p.dim, static_cast<unsigned long long>(p.capacity),
        p.hbm_budget_gb > 0 ? "hybrid" : "all rows in HBM");
    std::printf("%-8s %-9s %-34s %-8s %9s %10s\n", "mode", "copies", "op", "batch", "keys",
                "M keys/s");
    std::vector<Cell> cells;
    for (const std::string& mode : p.modes) {
      auto c = run(p, mode, zipf, distinct);
      cells.insert(cells.end(), c.begin(), c.end());
    }
    if (!p.json_path.empty()) {
      namespace b = dynemb::bench;
      nlohmann::json j;
      j["benchmark"] = "table copies";
      j["machine"] = b::machine_json(b::query_machine_info());
      j["gpu"] = b::gpu_json(b::query_gpu_info(0));
      j["commit"] = b::git_commit(DYNEMB_SOURCE_DIR);
      j["date"] = b::utc_now_iso8601();
      j["params"] = {
          {"dim", p.dim},         {"capacity", p.capacity}, {"hbm_budget_gb", p.hbm_budget_gb},
          {"batch", p.batch},     {"ids", p.ids},           {"zipf", p.zipf},
          {"repeats", p.repeats}, {"seed", p.seed},         {"distinct_keys", distinct.size()},
          {"modes", p.modes}};
      for (const Cell& c : cells)
        j["cells"].push_back({{"op", c.op},
                              {"batch", c.batch_kind},
                              {"mode", c.mode},
                              {"coalesce", c.mode == "coalesce"},
                              {"keys", c.keys},
                              {"mkeys_per_s", c.mkeys_per_s}});
      b::write_json_file(p.json_path, j);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dynemb_bench_copies: %s\n", e.what());
    return 1;
  }
}

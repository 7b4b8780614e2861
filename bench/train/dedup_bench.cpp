#include "bench/train/dedup_bench.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/table/machine_info.hpp"
#include "bench/table/result_file.hpp"
#include "bench/train/table_workers.hpp"
#include "bench/train/train_bench.hpp"
#include "bench/train/zipf.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "dynemb/ops/step_workspace.hpp"

namespace dynemb::bench {
namespace {

// torch.unique(return_inverse, return_counts) on 1M Zipf keys on the H100 (../shared/ANCHORS.md).
constexpr double kTorchUniqueAnchorKeysPerSecond = 3.8e9;

// One dedup call's inputs and outputs in backend memory, with its workspace.
struct DedupCall {
  DedupCall(Backend backend, const std::vector<int64_t>& host_keys, uint64_t bags,
            uint32_t ids_per_bag)
      : n(host_keys.size()),
        num_bags(bags),
        keys(backend, n),
        offsets(backend, bags + 1),
        unique_keys(backend, n),
        inverse(backend, n),
        ids_by_row(backend, n),
        row_begin(backend, n + 1),
        bag_by_row(backend, n),
        workspace(backend, 0) {
    keys.upload(host_keys.data(), n);
    std::vector<int64_t> host_offsets(bags + 1);
    for (uint64_t b = 0; b <= bags; ++b) host_offsets[b] = static_cast<int64_t>(b * ids_per_bag);
    offsets.upload(host_offsets.data(), host_offsets.size());
  }

  // The step's dedup of these keys on `stream`; returns the unique count (synchronizes).
  size_t run(Backend backend, StreamHandle stream) {
    return ops::detail::dedup_grouped<int64_t>(
        backend, n, keys.data(), unique_keys.data(), inverse.data(), ids_by_row.data(),
        row_begin.data(), bag_by_row.data(), offsets.data(), num_bags, "bench dedup",
        ops::detail::ReadAlong{}, workspace, stream);
  }

  size_t n;
  uint64_t num_bags;
  BackendBuffer<int64_t> keys, offsets, unique_keys;
  BackendBuffer<uint32_t> inverse, ids_by_row, row_begin, bag_by_row;
  ops::detail::StepWorkspace workspace;
};

// Median and minimum seconds of `repeats` runs of `once` (which ends with its streams done)
// after `warmup` untimed ones.
template <class F>
std::pair<double, double> time_runs(uint32_t warmup, uint32_t repeats, F once) {
  for (uint32_t i = 0; i < warmup; ++i) once();
  std::vector<double> s;
  for (uint32_t i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    once();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(s.begin(), s.end());
  return {s[s.size() / 2], s.front()};
}

}  // namespace

void validate_dedup_bench_config(const DedupBenchConfig& c) {
  constexpr const char* w = "bench dedup";
  validate_step_shape(w, c.tables, c.rows_per_table, c.batch, c.ids_per_bag, c.zipf_alpha);
  require(c.tables * c.batch * c.ids_per_bag < (uint64_t{1} << 31), w,
          "--tables x --batch x --ids-per-bag", std::to_string(c.tables * c.batch * c.ids_per_bag),
          "must be < 2^31 (the one call over every table)");
  require(c.repeats >= 1, w, "--repeats", std::to_string(c.repeats), "must be >= 1");
}

DedupBenchReport run_dedup_bench(const DedupBenchConfig& c, std::ostream& progress) {
  validate_dedup_bench_config(c);
  DedupBenchReport r;
  r.config = c;
  r.machine = query_machine_info();
  r.gpu = c.backend == Backend::kCuda ? query_gpu_info(0) : std::nullopt;
  r.git_commit = git_commit(DYNEMB_SOURCE_DIR);
  r.date_utc = utc_now_iso8601();

  // Table t's keys are its ids with t in the bits above them, so the one call over every table
  // sorts the ids' bits and the table index's, as a grouped step would.
  const int id_bits = std::bit_width(c.rows_per_table - 1);
  const uint64_t ids = c.batch * c.ids_per_bag;
  std::mt19937_64 rng(c.seed != 0 ? c.seed : std::random_device{}());
  const ZipfSampler zipf(c.rows_per_table, c.zipf_alpha);
  std::vector<std::vector<int64_t>> host_keys(c.tables, std::vector<int64_t>(ids));
  std::vector<int64_t> all_keys;
  all_keys.reserve(ids * c.tables);
  for (uint32_t t = 0; t < c.tables; ++t) {
    for (auto& k : host_keys[t]) k = static_cast<int64_t>((uint64_t{t} << id_bits) | zipf(rng));
    all_keys.insert(all_keys.end(), host_keys[t].begin(), host_keys[t].end());
  }
  std::vector<std::unique_ptr<DedupCall>> per_table;
  std::vector<std::unique_ptr<BenchClock>> clocks;  // a stream per table
  for (uint32_t t = 0; t < c.tables; ++t) {
    per_table.push_back(
        std::make_unique<DedupCall>(c.backend, host_keys[t], c.batch, c.ids_per_bag));
    clocks.push_back(make_bench_clock(c.backend));
  }
  DedupCall grouped(c.backend, all_keys, c.batch * c.tables, c.ids_per_bag);

  // Records a scenario timed as `s` whose calls found `unique` keys in all.
  auto add = [&](const std::string& name, uint64_t calls, uint64_t keys_per_call,
                 std::pair<double, double> s, uint64_t unique) {
    r.scenarios.push_back({name, calls, keys_per_call, unique, s.first, s.second});
    progress << name << ": " << s.first * 1e3 << " ms\n";
  };

  std::vector<uint64_t> unique(c.tables);
  auto one_after_another = [&] {
    for (uint32_t t = 0; t < c.tables; ++t)
      unique[t] = per_table[t]->run(c.backend, clocks[0]->stream());
    clocks[0]->synchronize();
  };
  auto sum = [&] {
    uint64_t s = 0;
    for (uint64_t u : unique) s += u;
    return s;
  };
  const auto in_turn = time_runs(c.warmup, c.repeats, one_after_another);
  add("per_table_one_after_another", c.tables, ids, in_turn, sum());

  TableWorkers workers(c.tables);
  auto side_by_side = [&] {
    workers.run([&](uint32_t t) {
      unique[t] = per_table[t]->run(c.backend, clocks[t]->stream());
      clocks[t]->synchronize();
    });
  };
  const auto beside = time_runs(c.warmup, c.repeats, side_by_side);
  add("per_table_side_by_side", c.tables, ids, beside, sum());

  uint64_t grouped_unique = 0;
  auto all_at_once = [&] {
    grouped_unique = grouped.run(c.backend, clocks[0]->stream());
    clocks[0]->synchronize();
  };
  const auto one_call = time_runs(c.warmup, c.repeats, all_at_once);
  add("all_tables_one_call", 1, ids * c.tables, one_call, grouped_unique);

  for (const auto& s : r.scenarios) {
    if (s.unique_keys != grouped_unique) {
      throw Error("bench dedup: " + s.name + " found " + std::to_string(s.unique_keys) +
                  " unique keys, the one call over every table " + std::to_string(grouped_unique) +
                  ": the scenarios disagree");
    }
  }
  return r;
}

std::string report_dedup_bench(const DedupBenchReport& r, std::ostream& out) {
  const DedupBenchConfig& c = r.config;
  out << std::fixed << std::setprecision(3);
  out << "\ndynemb bench dedup (" << to_string(c.backend) << "): " << c.tables << " tables x "
      << c.batch << " bags x " << c.ids_per_bag << " ids, Zipf " << c.zipf_alpha << " over "
      << c.rows_per_table << " ids; median of " << c.repeats << "\n";
  out << "| scenario | calls | keys a call | unique keys | ms (median) | ms (min) | M keys/s |\n"
      << "| --- | --- | --- | --- | --- | --- | --- |\n";
  nlohmann::json results = nlohmann::json::array();
  for (const auto& s : r.scenarios) {
    const double keys = static_cast<double>(s.calls * s.keys_per_call);
    out << "| " << s.name << " | " << s.calls << " | " << s.keys_per_call << " | " << s.unique_keys
        << " | " << s.seconds_median * 1e3 << " | " << s.seconds_min * 1e3 << " | "
        << std::setprecision(1) << keys / s.seconds_median / 1e6 << std::setprecision(3) << " |\n";
    results.push_back({{"scenario", s.name},
                       {"calls", s.calls},
                       {"keys_per_call", s.keys_per_call},
                       {"unique_keys", s.unique_keys},
                       {"ms_median", s.seconds_median * 1e3},
                       {"ms_min", s.seconds_min * 1e3},
                       {"m_keys_per_s", keys / s.seconds_median / 1e6}});
  }
  if (c.backend == Backend::kCuda) {
    out << "anchor: torch.unique(return_inverse, return_counts), 1M Zipf keys, H100: "
        << std::setprecision(0) << kTorchUniqueAnchorKeysPerSecond / 1e6
        << " M keys/s (../shared/ANCHORS.md)\n"
        << std::setprecision(3);
  }

  nlohmann::json j;
  j["benchmark"] = "dynemb bench dedup";
  j["machine"] = machine_json(r.machine);
  j["gpu"] = gpu_json(r.gpu);
  j["git_commit"] = r.git_commit;
  j["date_utc"] = r.date_utc;
  j["parameters"] = {{"backend", to_string(c.backend)},
                     {"tables", c.tables},
                     {"rows_per_table", c.rows_per_table},
                     {"batch", c.batch},
                     {"ids_per_bag", c.ids_per_bag},
                     {"zipf_alpha", c.zipf_alpha},
                     {"warmup", c.warmup},
                     {"repeats", c.repeats},
                     {"seed", c.seed},
                     {"key_type", "int64"},
                     {"keys", "table index in the bits above the ids"},
                     {"op",
                      "dedup_grouped (the training step's: unique keys, inverse, ids grouped "
                      "by key, their bags, offsets checked)"},
                     {"timing", "host wall clock around synchronizing calls"}};
  j["results"] = results;
  if (c.backend == Backend::kCuda)
    j["anchor_torch_unique_m_keys_per_s"] = kTorchUniqueAnchorKeysPerSecond / 1e6;
  const std::string path =
      !c.json_path.empty()
          ? c.json_path
          : default_result_path(DYNEMB_SOURCE_DIR,
                                "dedup-" + to_string(c.backend) + "-" +
                                    std::to_string(c.tables * c.batch * c.ids_per_bag / 1000) + "k",
                                r.machine.hostname);
  write_json_file(path, j);
  out << "wrote " << path << "\n";
  return path;
}

}  // namespace dynemb::bench

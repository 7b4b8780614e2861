#include "bench/table/table_bench.hpp"

#include <chrono>
#include <filesystem>
#include <map>
#include <ostream>
#include <random>

#include "bench/table/dynemb_scenario.hpp"
#include "bench/table/machine_info.hpp"
#include "bench/table/peer_scenario.hpp"
#include "bench/table/report.hpp"
#include "bench/table/result_file.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

// Times each peer on the keys of `dynemb_run`, one peer alive at a time.
void run_peers(const TableBenchConfig& config, uint32_t threads, DynembScenarioOutput& run,
               std::ostream& progress) {
  ScenarioResult& s = run.result;
  if (!peer_dim_supported(s.dim)) {
    s.notes.push_back("peers are compiled for dims " + peer_dims_list() + " only");
    return;
  }
  for (int which = 0; which < 2; ++which) {
    const auto begin = std::chrono::steady_clock::now();
    std::unique_ptr<PeerMap> peer = which == 0 ? make_cuckoo_peer(s.dim, s.capacity, threads)
                                               : make_absl_peer(s.dim, s.capacity);
    s.peers[peer->name()] =
        run_peer_scenario(*peer, config, s.dim, s.capacity, run.stored, run.batch);
    progress << "  " << peer->name() << " done in " << seconds_since(begin) << " s\n";
  }
}

}  // namespace

TableBenchReport run_table_bench(const TableBenchConfig& input, std::ostream& progress) {
  TableBenchConfig config = input;
  validate(config);
  if (config.seed == 0)
    config.seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);

  TableBenchReport report;
  report.config = config;
  report.hkv_runs = read_hkv_runs(config.hkv_outputs);
  report.threads = effective_threads(config);
  report.machine = query_machine_info();
  report.gpu = config.backend == Backend::kCuda ? query_gpu_info(0) : std::nullopt;
  if (config.backend == Backend::kCuda && config.hbm_budget_gb && config.pcie_floor) {
    // Random rows are measured over as many bytes as each dim's table keeps in host memory.
    std::map<uint32_t, size_t> host_regions;
    for (uint32_t dim : config.dims) {
      const uint64_t capacity = table_capacity(config, dim);
      const double share = host_row_share(capacity, dim, *config.hbm_budget_gb * 1073741824.0);
      const double bytes = share * static_cast<double>(capacity) * 4.0 * dim;
      if (bytes > 0) host_regions[dim] = static_cast<size_t>(bytes);
    }
    report.pcie = measure_pcie_bandwidth(0, host_regions);
  }
  report.git_commit = git_commit(DYNEMB_SOURCE_DIR);
  report.date_utc = utc_now_iso8601();
  report.load_average_start = load_averages();

  progress << "dynemb bench table: backend " << to_string(config.backend) << ", seed "
           << config.seed << "\n";
  KeySource fresh(config.seed);
  std::mt19937_64 rng(config.seed);
  std::unique_ptr<BenchClock> clock = make_bench_clock(config.backend);
  for (uint32_t dim : config.dims) {
    for (double load_factor : config.load_factors) {
      const auto begin = std::chrono::steady_clock::now();
      progress << "dim " << dim << ", load factor " << load_factor << ", capacity "
               << table_capacity(config, dim) << ": dynemb ..." << std::flush;
      DynembScenarioOutput run = run_dynemb_scenario(config, dim, load_factor, fresh, rng, *clock);
      progress << " done in " << seconds_since(begin) << " s\n";
      if (config.backend == Backend::kCpu && config.peers) {
        run_peers(config, report.threads, run, progress);
      }
      report.scenarios.push_back(std::move(run.result));
    }
  }
  report.load_average_end = load_averages();
  return report;
}

std::string default_json_path(const TableBenchReport& report) {
  std::filesystem::path dir = std::filesystem::path(DYNEMB_SOURCE_DIR) / "bench" / "results";
  if (!std::filesystem::is_directory(dir)) dir = std::filesystem::current_path();
  const std::string name = "table-" + to_string(report.config.backend) +
                           (report.config.hbm_budget_gb ? "-hybrid" : "") + "-" +
                           machine_label(report.machine.hostname) +
                           (report.config.quick ? "-quick" : "") + ".json";
  return (dir / name).string();
}

std::string run_and_report(const TableBenchConfig& config, std::ostream& out,
                           std::ostream& progress) {
  const TableBenchReport report = run_table_bench(config, progress);
  const std::string tables = render_tables(report);
  out << tables << std::flush;
  const std::string json_path =
      config.json_path.empty() ? default_json_path(report) : config.json_path;
  write_json_file(json_path, to_json(report));
  progress << "wrote " << json_path << "\n";
  if (!config.markdown_path.empty()) {
    write_text_file(config.markdown_path, tables);
    progress << "wrote " << config.markdown_path << "\n";
  }
  return json_path;
}

}  // namespace dynemb::bench

#include "bench/table/report.hpp"

#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "bench/table/hkv_anchors.hpp"
#include "bench/table/peer_scenario.hpp"
#include "bench/table/result_file.hpp"

namespace dynemb::bench {
namespace {

using Cell = std::function<std::optional<double>(const ScenarioResult&, TableOp)>;

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, v);
  return text;
}

std::optional<double> timing_of(const OpTimings& timings, TableOp op,
                                double (OpTiming::*unit)() const) {
  const auto it = timings.find(op);
  if (it == timings.end() || it->second.pairs == 0) return std::nullopt;
  return (it->second.*unit)();
}

const OpTimings* peer_timings(const ScenarioResult& s, const std::string& peer) {
  const auto it = s.peers.find(peer);
  return it == s.peers.end() ? nullptr : &it->second;
}

std::optional<double> ratio(std::optional<double> ours, std::optional<double> theirs) {
  if (!ours || !theirs || *theirs <= 0) return std::nullopt;
  return *ours / *theirs;
}

// The two floors of a hybrid call: its host-row bytes at the bulk-copy bandwidth, or at the
// random-row rate measured for its dim.
enum class Floor { kBulkCopy, kRandomRows };

// The call's floor in seconds (hybrid runs whose rows partly live in host memory).
std::optional<double> floor_of(const TableBenchReport& r, const ScenarioResult& s, TableOp op,
                               Floor kind) {
  if (!r.pcie || !r.config.hbm_budget_gb) return std::nullopt;
  const double share = host_row_share(s.capacity, s.dim, *r.config.hbm_budget_gb * 1073741824.0);
  const PcieBytes bytes = pcie_bytes(op, r.config.batch, s.dim, share, s.load_factor);
  const std::optional<double> floor = kind == Floor::kBulkCopy
                                          ? pcie_floor_seconds(bytes, *r.pcie)
                                          : random_row_floor_seconds(bytes, *r.pcie, s.dim);
  if (share <= 0.0 || !floor || *floor <= 0.0) return std::nullopt;
  return floor;
}

// Measured time over that floor (1.0 = at the limit).
std::optional<double> over_floor(const TableBenchReport& r, const ScenarioResult& s, TableOp op,
                                 Floor kind) {
  const auto floor = floor_of(r, s, op, kind);
  const auto it = s.dynemb.find(op);
  if (!floor || it == s.dynemb.end() || it->second.seconds <= 0) return std::nullopt;
  return it->second.seconds / *floor;
}

// HKV's figure for the cell: from its run in the same device call where one has it, else the
// H100 anchor.
std::optional<double> same_run_of(const TableBenchReport& r, const ScenarioResult& s, TableOp op) {
  if (r.config.backend != Backend::kCuda) return std::nullopt;
  return hkv_same_run(r.hkv_runs, s.dim, s.capacity, s.load_factor, op, r.config.hbm_budget_gb);
}

std::optional<double> anchor_of(const TableBenchReport& r, const ScenarioResult& s, TableOp op) {
  if (r.config.backend != Backend::kCuda) return std::nullopt;
  if (const auto same = same_run_of(r, s, op)) return same;
  return hkv_anchor(s.dim, s.capacity, s.load_factor, op, r.config.hbm_budget_gb);
}

// Where the HKV figures of the printed tables come from.
std::string hkv_source(const TableBenchReport& r) {
  if (r.hkv_runs.empty()) return hkv_anchor_source();
  std::string runs;
  for (const HkvRun& run : r.hkv_runs) {
    runs += (runs.empty() ? "" : "; ") + run.path + ": " + run.gpu + ", " + run.mode + " dim " +
            std::to_string(run.dim);
  }
  return "HKV run in this call (" + runs + "); cells it lacks: " + hkv_anchor_source() +
         "; find_or_insert* is the peer of both pointer ops";
}

// One table: rows = the scenarios of `dim`, columns = config.ops.
void render_block(std::ostringstream& out, const TableBenchReport& report, uint32_t dim,
                  const std::string& title, const Cell& cell, int digits) {
  std::ostringstream body;
  bool any = false;
  for (const ScenarioResult& s : report.scenarios) {
    if (s.dim != dim) continue;
    body << "| " << fixed(s.load_factor, 2) << " |";
    for (TableOp op : report.config.ops) {
      const auto v = cell(s, op);
      any = any || v.has_value();
      body << " " << (v ? fixed(*v, digits) : "-") << " |";
    }
    body << "\n";
  }
  if (!any) return;
  out << "\n" << title << "\n\n| λ |";
  for (TableOp op : report.config.ops) out << " " << op_name(op) << " |";
  out << "\n| --- |";
  for (size_t i = 0; i < report.config.ops.size(); ++i) out << " --- |";
  out << "\n" << body.str();
}

// The peers present in the report, libcuckoo first.
std::vector<std::string> peer_names(const TableBenchReport& report) {
  std::set<std::string> names;
  for (const ScenarioResult& s : report.scenarios) {
    for (const auto& [name, timings] : s.peers) names.insert(name);
  }
  std::vector<std::string> ordered(names.rbegin(), names.rend());
  return ordered;
}

std::string load_text(const std::vector<double>& load) {
  return load.empty() ? std::string("unknown") : fixed(load[0], 2);
}

nlohmann::json timing_json(const OpTiming& t) {
  return {{"seconds", t.seconds},
          {"pairs", t.pairs},
          {"b_kv_s", t.b_kv_s()},
          {"m_kv_s", t.m_kv_s()},
          {"cpu_seconds", t.cpu_seconds},
          {"cores_busy", t.seconds > 0 ? t.cpu_seconds / t.seconds : 0.0}};
}

nlohmann::json optional_json(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string render_tables(const TableBenchReport& report) {
  const TableBenchConfig& c = report.config;
  std::ostringstream out;
  out << "## dynemb bench table: backend " << to_string(c.backend);
  if (c.backend == Backend::kCpu) out << ", " << report.threads << " threads";
  if (report.gpu) out << ", " << report.gpu->name;
  out << "\n\nHost " << report.machine.hostname << " (" << report.machine.cpu_model << "), commit "
      << report.git_commit << ", " << report.date_utc << ", load average "
      << load_text(report.load_average_start) << " at start, " << load_text(report.load_average_end)
      << " at end (" << report.machine.cores << " hardware threads). One call of " << c.batch
      << " keys (60% present, 40% new), best of " << c.repeats
      << (c.backend == Backend::kCuda ? " after a warm-up call" : "")
      << "; TIMESTAMP scores, fixed capacity. B-KV/s = 2^30 KV/s, M-KV/s = 2^20 KV/s. export "
         "walks the whole capacity in export_batch chunks and counts every slot as one pair.\n";
  if (report.pcie) {
    out << "\nPCIe measured in this run: bulk copies "
        << fixed(report.pcie->host_to_device / 1e9, 1) << " GB/s to the device, "
        << fixed(report.pcie->device_to_host / 1e9, 1) << " GB/s to the host";
    for (const auto& [dim, rate] : report.pcie->random_rows) {
      out << "; random rows of dim " << dim << ": read " << fixed(rate.read / 1e9, 1)
          << " GB/s, written " << fixed(rate.write / 1e9, 1) << " GB/s, both at once "
          << fixed(rate.both / 1e9, 1) << " GB/s (read + written)";
    }
    out << ".\n";
  }
  std::vector<uint32_t> dims;
  for (const ScenarioResult& s : report.scenarios) {
    if (dims.empty() || dims.back() != s.dim) dims.push_back(s.dim);
  }
  const std::vector<std::string> peers = peer_names(report);
  for (uint32_t dim : dims) {
    uint64_t capacity = 0;
    for (const ScenarioResult& s : report.scenarios) {
      if (s.dim == dim) capacity = s.capacity;
    }
    out << "\n### dim " << dim << ", capacity " << capacity << "\n";
    render_block(
        out, report, dim, "dynemb, B-KV/s",
        [](const ScenarioResult& s, TableOp op) {
          return timing_of(s.dynemb, op, &OpTiming::b_kv_s);
        },
        4);
    render_block(
        out, report, dim, "dynemb, M-KV/s",
        [](const ScenarioResult& s, TableOp op) {
          return timing_of(s.dynemb, op, &OpTiming::m_kv_s);
        },
        1);
    for (const std::string& peer : peers) {
      render_block(
          out, report, dim, peer + ", M-KV/s",
          [&](const ScenarioResult& s, TableOp op) {
            const OpTimings* t = peer_timings(s, peer);
            return t ? timing_of(*t, op, &OpTiming::m_kv_s) : std::nullopt;
          },
          1);
    }
    for (const std::string& peer : peers) {
      render_block(
          out, report, dim, "ratio dynemb / " + peer,
          [&](const ScenarioResult& s, TableOp op) {
            const OpTimings* t = peer_timings(s, peer);
            return t ? ratio(timing_of(s.dynemb, op, &OpTiming::b_kv_s),
                             timing_of(*t, op, &OpTiming::b_kv_s))
                     : std::nullopt;
          },
          2);
    }
    render_block(
        out, report, dim, "HKV (" + hkv_source(report) + "), B-KV/s",
        [&](const ScenarioResult& s, TableOp op) { return anchor_of(report, s, op); }, 3);
    render_block(
        out, report, dim, "ratio dynemb / HKV",
        [&](const ScenarioResult& s, TableOp op) {
          return ratio(timing_of(s.dynemb, op, &OpTiming::b_kv_s), anchor_of(report, s, op));
        },
        2);
    render_block(
        out, report, dim,
        "hybrid: time over the PCIe floor (host-resident rows' bytes / measured PCIe bandwidth)",
        [&](const ScenarioResult& s, TableOp op) {
          return over_floor(report, s, op, Floor::kBulkCopy);
        },
        2);
    render_block(
        out, report, dim,
        "hybrid: time over the random-row floor (host-resident rows' bytes / the rate "
        "kernels gather or scatter random rows of this dim over the same link, visited in "
        "address order as the table visits them; a call that reads and writes: its touched "
        "rows at the rate of both at once, if longer)",
        [&](const ScenarioResult& s, TableOp op) {
          return over_floor(report, s, op, Floor::kRandomRows);
        },
        2);
    for (const ScenarioResult& s : report.scenarios) {
      if (s.dim != dim) continue;
      for (const std::string& note : s.notes) {
        out << "\nNote (λ " << fixed(s.load_factor, 2) << "): " << note << "\n";
      }
    }
  }
  return out.str();
}

nlohmann::json to_json(const TableBenchReport& report) {
  const TableBenchConfig& c = report.config;
  nlohmann::json j;
  j["benchmark"] = "dynemb bench table";
  j["schema_version"] = 1;
  j["backend"] = to_string(c.backend);
  j["machine"] = machine_json(report.machine);
  j["gpu"] = gpu_json(report.gpu);
  if (report.pcie) {
    j["pcie_bandwidth_gb_s"] = {{"host_to_device", report.pcie->host_to_device / 1e9},
                                {"device_to_host", report.pcie->device_to_host / 1e9},
                                {"method", "1 GiB cudaMemcpyAsync, pinned host memory, best of 3"}};
    nlohmann::json rows = nlohmann::json::object();
    for (const auto& [dim, rate] : report.pcie->random_rows) {
      rows[std::to_string(dim)] = {
          {"read", rate.read / 1e9}, {"write", rate.write / 1e9}, {"both", rate.both / 1e9}};
    }
    j["pcie_random_rows_gb_s"] = {
        {"by_dim", rows},
        {"method",
         "2^19 uniform random rows gathered from / scattered to mapped pinned host memory as "
         "large as the table's host-resident rows, visited in ascending address order, a warp "
         "per row (8-byte words), best of 3; both: random rows copied to other random rows of "
         "that memory, bytes read + written"}};
  }
  j["load_average"] = {{"start", report.load_average_start}, {"end", report.load_average_end}};
  j["git_commit"] = report.git_commit;
  j["date_utc"] = report.date_utc;
  j["units"] = {{"b_kv_s", "2^30 key-value pairs per second"},
                {"m_kv_s", "2^20 key-value pairs per second"},
                {"export",
                 "pairs = capacity slots walked (export_batch chunks of --batch slots; "
                 "peers: iterate every stored key)"}};
  nlohmann::json ops = nlohmann::json::array();
  for (TableOp op : c.ops) ops.push_back(op_name(op));
  nlohmann::json params = {
      {"backend", to_string(c.backend)},
      {"dims", c.dims},
      {"load_factors", c.load_factors},
      {"capacity_option", c.capacity ? nlohmann::json(*c.capacity) : nlohmann::json(nullptr)},
      {"batch", c.batch},
      {"present_fraction", kPresentFraction},
      {"repeats", c.repeats},
      {"timing", c.backend == Backend::kCuda
                     ? "cudaEvent on a created stream, one warm-up call, best of repeats"
                     : "std::chrono::steady_clock, best of repeats"},
      {"threads", report.threads},
      {"hbm_budget_gb", c.hbm_budget_gb ? nlohmann::json(*c.hbm_budget_gb) : nlohmann::json()},
      {"ops", ops},
      {"peers", c.peers && c.backend == Backend::kCpu},
      {"seed", c.seed},
      {"quick", c.quick},
      {"key_type", "uint64"},
      {"value_type", "float32"},
      {"score_policy", "timestamp"},
      {"initializer", c.backend == Backend::kCpu ? "constant 0 (the peers insert zero rows)"
                                                 : "uniform [-0.05, 0.05) (Philox)"},
      {"bucket_capacity", kBenchBucketCapacity},
      {"init_capacity_equals_max_capacity", true},
      {"safe_check", "ignore"},
      {"thread_safe", c.backend == Backend::kCpu},
      {"grouped_write_min_batch", c.grouped_write_min_batch},
      {"host_keys_in_flight", c.host_keys_in_flight},
      {"join_contended_copies", c.join_contended_copies},
      {"coalesce_copies_min_batch", c.coalesce_copies_min_batch
                                        ? nlohmann::json(*c.coalesce_copies_min_batch)
                                        : nlohmann::json("table default")},
      {"peer_notes",
       "libcuckoo::cuckoohash_map<uint64, std::array<float, dim>>, batch split over `threads` "
       "threads; absl::flat_hash_map behind one std::mutex, one lock per batch (single "
       "thread). Both reserve capacity slots, hold the same stored keys as the dynemb table and "
       "grow when they must (neither evicts: at load factor 1 libcuckoo has doubled its slots, "
       "so peers at λ = 1 are not at their own load factor 1)."},
  };
  j["parameters"] = params;
  if (c.backend == Backend::kCuda) {
    j["hkv_anchor_source"] = hkv_anchor_source();
    nlohmann::json runs = nlohmann::json::array();
    for (const HkvRun& run : report.hkv_runs) {
      runs.push_back({{"path", run.path},
                      {"gpu", run.gpu},
                      {"mode", run.mode},
                      {"dim", run.dim},
                      {"capacity", run.capacity},
                      {"hbm_gb", run.hbm_gb},
                      {"b_kv_s", run.figures}});
    }
    j["hkv_same_call"] = runs;
  }

  nlohmann::json scenarios = nlohmann::json::array();
  for (const ScenarioResult& s : report.scenarios) {
    nlohmann::json sj = {{"dim", s.dim},
                         {"capacity", s.capacity},
                         {"load_factor", s.load_factor},
                         {"stored_keys", s.stored_keys},
                         {"achieved_load_factor", double(s.stored_keys) / double(s.capacity)},
                         {"fill_keys_inserted", s.fill_keys_inserted},
                         {"dynemb_stats",
                          {{"evictions", s.dynemb_stats.evictions},
                           {"refused", s.dynemb_stats.refused},
                           {"erased", s.dynemb_stats.erased},
                           {"rehashes", s.dynemb_stats.rehashes}}},
                         {"notes", s.notes}};
    nlohmann::json ops_json;
    for (TableOp op : c.ops) {
      nlohmann::json oj;
      const auto mine = s.dynemb.find(op);
      oj["dynemb"] = mine != s.dynemb.end() ? timing_json(mine->second) : nlohmann::json();
      for (const auto& [peer, timings] : s.peers) {
        const auto theirs = timings.find(op);
        oj[peer] = theirs != timings.end() ? timing_json(theirs->second) : nlohmann::json();
        oj["ratio_vs_" + peer] = optional_json(
            theirs != timings.end() ? ratio(timing_of(s.dynemb, op, &OpTiming::b_kv_s),
                                            timing_of(timings, op, &OpTiming::b_kv_s))
                                    : std::nullopt);
      }
      if (c.backend == Backend::kCuda) {
        const auto anchor = anchor_of(report, s, op);
        oj["hkv_anchor_b_kv_s"] = optional_json(anchor);
        oj["hkv_from_same_call"] = same_run_of(report, s, op).has_value();
        oj["ratio_vs_hkv"] =
            optional_json(ratio(timing_of(s.dynemb, op, &OpTiming::b_kv_s), anchor));
        if (report.pcie) {
          oj["pcie_floor_s"] = optional_json(floor_of(report, s, op, Floor::kBulkCopy));
          oj["over_pcie_floor"] = optional_json(over_floor(report, s, op, Floor::kBulkCopy));
          oj["random_row_floor_s"] = optional_json(floor_of(report, s, op, Floor::kRandomRows));
          oj["over_random_row_floor"] =
              optional_json(over_floor(report, s, op, Floor::kRandomRows));
        }
      }
      ops_json[std::string(op_name(op))] = oj;
    }
    sj["ops"] = ops_json;
    scenarios.push_back(sj);
  }
  j["results"] = scenarios;
  return j;
}

}  // namespace dynemb::bench

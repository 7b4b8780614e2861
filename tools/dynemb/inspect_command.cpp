// `dynemb inspect PATH`: what a checkpoint holds (tables, rows, dims, score range, sizes) and
// whether every file verifies (sizes, headers, CRC32C).
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>

#include "command_registry.hpp"
#include "dynemb/checkpoint/format.hpp"

namespace {

namespace ckpt = dynemb::checkpoint;

struct InspectArgs {
  std::string path;
  bool no_verify = false;
};

std::string utc_of_ns(uint64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1000000000ull);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return text;
}

void run(const InspectArgs& a) {
  const ckpt::InspectResult r = ckpt::inspect(a.path, !a.no_verify);
  const ckpt::Manifest& m = r.manifest;
  std::cout << "checkpoint " << a.path << "\n"
            << "  format version " << m.format_version << ", "
            << (m.delta ? "delta (rows with score >= " + std::to_string(*m.min_score) + ")"
                        : std::string("full"))
            << ", world size " << m.world_size << ", dumped " << utc_of_ns(m.dump_time_ns) << "\n  "
            << m.tables.size() << " table(s), " << human_bytes(r.total_bytes)
            << " in data files\n\n";
  std::printf("  %-20s %-6s %-8s %6s %-22s %-10s %14s %12s %-27s %12s\n", "table", "keys", "values",
              "dim", "optimizer (state)", "policy", "score/step", "rows", "score range", "bytes");
  for (const ckpt::TableEntry& t : m.tables) {
    uint64_t lo = ~0ull, hi = 0, bytes = 0;
    for (const ckpt::ShardEntry& s : t.shards) {
      if (s.rows > 0) {
        lo = std::min(lo, s.min_score);
        hi = std::max(hi, s.max_score);
      }
      bytes += s.keys.bytes + s.values.bytes + s.scores.bytes +
               (s.optimizer_state ? s.optimizer_state->bytes : 0);
    }
    const std::string optimizer =
        t.optimizer.empty()
            ? "-"
            : t.optimizer + " (" +
                  (t.has_optimizer_state ? std::to_string(t.optimizer_state_dim) : "not saved") +
                  ")";
    const std::string range =
        t.rows == 0 ? "-" : "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    std::printf("  %-20s %-6s %-8s %6u %-22s %-10s %14llu %12llu %-27s %12s\n", t.name.c_str(),
                ckpt::to_string(t.key_dtype).c_str(), ckpt::to_string(t.value_dtype).c_str(), t.dim,
                optimizer.c_str(), t.score_policy.c_str(), static_cast<unsigned long long>(t.score),
                static_cast<unsigned long long>(t.rows), range.c_str(), human_bytes(bytes).c_str());
    if (m.world_size > 1) {
      for (const ckpt::ShardEntry& s : t.shards) {
        std::printf("  %-20s rank %u: %llu rows\n", "", s.rank,
                    static_cast<unsigned long long>(s.rows));
      }
    }
  }
  if (m.metadata != "{}") {
    // The caller's own state (e.g. dynemb train's run id, samples and steps).
    const std::string shown =
        m.metadata.size() > 400 ? m.metadata.substr(0, 400) + "..." : m.metadata;
    std::cout << "\n  metadata: " << shown << "\n";
  }
  std::cout << "\n";
  if (a.no_verify) {
    std::cout << "  verified: not checked (--no-verify)\n";
  } else if (r.verified) {
    std::cout << "  verified: yes (manifest checksum; every file present, sized, headers and "
                 "CRC32C match)\n";
  } else {
    std::cout << "  verified: NO\n";
    throw ckpt::CheckpointError(r.problem);
  }
}

void install(CLI::App& cmd) {
  auto args = std::make_shared<InspectArgs>();
  cmd.add_option("path", args->path, "checkpoint directory")->required();
  cmd.add_flag("--no-verify", args->no_verify,
               "only read the manifest (skip reading every file for its checksum)");
  cmd.footer(
      "Exit status 0 when the checkpoint verifies, 1 when a file is missing, truncated, "
      "corrupt or does not match the manifest (the problem is printed).");
  cmd.callback([args] { run(*args); });
}

const bool registered = dynemb::tools::register_command(
    {{"inspect"},
     "Show what a checkpoint holds (tables, rows, dims, score range, sizes) and verify it",
     install});

}  // namespace

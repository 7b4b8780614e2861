// From training to serving: a training checkpoint's embedding rows loaded into a lower tier (a
// CPU table) and a preloaded inference cache, then a power-law key stream replayed through the
// cache's lookup path. The glue lives here because the cache part may not depend on checkpoints.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "dynemb/core/options.hpp"

namespace dynemb::tools {

struct CheckpointReplayConfig {
  std::string checkpoint;  // checkpoint directory
  std::string table;       // table name ("" = the first table of the manifest)
  Backend backend = Backend::kCpu;
  uint64_t cache_rows = 0;  // rows the cache holds (0 = every row of the table)
  uint64_t batch = 65536;   // draws per lookup call
  uint32_t calls = 50;      // timed lookup calls
  double alpha = 1.2;       // power law over the table's rows, hottest = highest score
  double replace_below_hit_rate = 1.0;
  uint64_t seed = 0;      // 0 = random
  std::string json_path;  // default bench/results/cache-replay-<backend>-<machine>.json
};

// Loads, preloads, replays; prints progress to `log` and returns the result (also written).
nlohmann::json run_checkpoint_replay(const CheckpointReplayConfig& config, std::ostream& log);

}  // namespace dynemb::tools

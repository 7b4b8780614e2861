// The sharding planner: from table sizes, dims and optimizers, the world size and each rank's
// HBM and host budgets, per-rank capacities (whole buckets) and a memory mode per table, and
// the plan printed as a table (docs/dist.md, "Planner").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dynemb/embedding/embedding.hpp"

namespace dynemb::dist {

// One table to place.
struct PlanTableConfig {
  std::string name;
  uint64_t rows = 0;  // keys expected over the whole job
  uint32_t dim = 0;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  uint32_t bucket_capacity = 128;
  double max_load_factor = 0.5;  // a rank's table is sized so its expected rows stay below this
  bool align_rows = true;
};

// What each rank may use.
struct PlanBudget {
  uint32_t world_size = 1;
  Backend backend = Backend::kCuda;
  uint64_t hbm_bytes = 0;   // per rank, for tables (leave the model's share out)
  uint64_t host_bytes = 0;  // per rank: pinned host values (hybrid) and host tiers (caching)
};

// Where a table's rows live on a rank.
enum class MemoryMode : uint8_t {
  kHbm,      // keys, scores and values in HBM
  kHybrid,   // keys and scores in HBM, values beyond an HBM budget in pinned host memory
  kCaching,  // an HBM table caches a lower tier (host memory or beyond) holding every row
  kHost,     // the CPU backend: everything in host memory
};

// "hbm", "hybrid", "caching", "host".
std::string to_string(MemoryMode mode);

// One table's placement on every rank (all ranks alike).
struct TablePlan {
  PlanTableConfig config;
  MemoryMode mode = MemoryMode::kHbm;
  uint32_t row_floats = 0;          // embedding + optimizer state (+ alignment) per row
  uint64_t rows_per_rank = 0;       // expected rows on the busiest rank (hash routing)
  uint64_t capacity = 0;            // slots of the rank's table, whole buckets
  uint64_t hbm_bytes = 0;           // per rank: slots' keys / digests / scores, and HBM values
  uint64_t host_bytes = 0;          // per rank: host values (hybrid) or the lower tier (caching)
  uint64_t max_hbm_for_values = 0;  // hybrid: TableOptions::max_hbm_for_values
  uint64_t tier_rows = 0;           // caching: rows the lower tier holds per rank
  bool fits = true;                 // false: even the lower tier exceeds the host budget
};

struct ShardingPlan {
  PlanBudget budget;
  std::vector<TablePlan> tables;  // in the order given
  uint64_t hbm_bytes = 0;         // per rank, summed over tables
  uint64_t host_bytes = 0;
  bool fits = true;  // every table fits the budgets
  // The plan as a table a person reads (one line per table, then the totals).
  std::string to_table() const;
};

// Plans `tables` over `budget.world_size` ranks. Each rank's table is sized for the rows the
// busiest rank expects under hash routing, divided by max_load_factor, rounded up to whole
// buckets. Tables are placed smallest first: all in HBM while it lasts, then hybrid (values
// spill to pinned host memory) while keys fit HBM and values fit HBM + host, else caching (an
// HBM cache over a host tier). Throws InvalidArgument naming the table and field for bad input.
ShardingPlan plan_sharding(const std::vector<PlanTableConfig>& tables, const PlanBudget& budget);

// `base` with the plan's capacities (init = max = capacity), bucket size, load factor and HBM
// budget for values applied: the options of this table on each rank.
EmbeddingOptions apply_plan(const TablePlan& plan, EmbeddingOptions base);

// HBM bytes per slot besides values: key, score and digest.
inline constexpr uint64_t kSlotOverheadBytes = sizeof(uint64_t) * 2 + 1;

}  // namespace dynemb::dist

// The sharding planner.
#include "dynemb/dist/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "dynemb/core/error.hpp"

namespace dynemb::dist {
namespace {

std::string bytes_text(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return text;
}

uint64_t round_up(uint64_t x, uint64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

// The busiest rank's rows when `rows` keys are hashed over `world` ranks: the mean plus four
// standard deviations of the binomial count (all of them at one rank).
uint64_t busiest_rank_rows(uint64_t rows, uint32_t world) {
  if (world <= 1) return rows;
  const double mean = static_cast<double>(rows) / world;
  const double sd = std::sqrt(mean * (1.0 - 1.0 / world));
  return std::min<uint64_t>(rows, static_cast<uint64_t>(std::ceil(mean + 4.0 * sd)));
}

}  // namespace

std::string to_string(MemoryMode mode) {
  switch (mode) {
    case MemoryMode::kHbm:
      return "hbm";
    case MemoryMode::kHybrid:
      return "hybrid";
    case MemoryMode::kCaching:
      return "caching";
    case MemoryMode::kHost:
    default:
      return "host";
  }
}

ShardingPlan plan_sharding(const std::vector<PlanTableConfig>& tables, const PlanBudget& budget) {
  constexpr const char* w = "plan_sharding";
  require(budget.world_size >= 1, w, "budget.world_size", std::to_string(budget.world_size),
          ">= 1");
  ShardingPlan plan;
  plan.budget = budget;
  for (size_t i = 0; i < tables.size(); ++i) {
    const PlanTableConfig& c = tables[i];
    const std::string field = "tables[" + std::to_string(i) + "] (\"" + c.name + "\").";
    require(c.rows > 0, w, (field + "rows").c_str(), "0", "> 0");
    require(c.dim > 0, w, (field + "dim").c_str(), "0", "> 0");
    require(c.bucket_capacity >= 16 && c.bucket_capacity <= 1024 &&
                (c.bucket_capacity & (c.bucket_capacity - 1)) == 0,
            w, (field + "bucket_capacity").c_str(), std::to_string(c.bucket_capacity),
            "a power of two in [16, 1024]");
    require(c.max_load_factor > 0 && c.max_load_factor <= 1, w, (field + "max_load_factor").c_str(),
            std::to_string(c.max_load_factor), "in (0, 1]");
    TablePlan p;
    p.config = c;
    EmbeddingOptions e;
    e.dim = c.dim;
    e.optimizer.kind = c.optimizer;
    e.align_rows = c.align_rows;
    p.row_floats = embedding_row_dim(e);
    p.rows_per_rank = busiest_rank_rows(c.rows, budget.world_size);
    p.capacity = round_up(static_cast<uint64_t>(std::ceil(p.rows_per_rank / c.max_load_factor)),
                          c.bucket_capacity);
    plan.tables.push_back(p);
  }
  // Smallest tables first, so the most tables stay wholly in HBM.
  std::vector<size_t> order(plan.tables.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto full_bytes = [](const TablePlan& p) {
    return p.capacity * (kSlotOverheadBytes + p.row_floats * sizeof(float));
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return full_bytes(plan.tables[a]) < full_bytes(plan.tables[b]);
  });
  uint64_t hbm_left = budget.hbm_bytes, host_left = budget.host_bytes;
  for (size_t i : order) {
    TablePlan& p = plan.tables[i];
    const uint64_t row_bytes = p.row_floats * sizeof(float);
    const uint64_t slot_bytes = p.capacity * kSlotOverheadBytes;
    const uint64_t value_bytes = p.capacity * row_bytes;
    if (budget.backend == Backend::kCpu) {
      p.mode = MemoryMode::kHost;
      p.host_bytes = slot_bytes + value_bytes;
      p.fits = p.host_bytes <= host_left;
      host_left -= std::min(host_left, p.host_bytes);
    } else if (slot_bytes + value_bytes <= hbm_left) {
      p.mode = MemoryMode::kHbm;
      p.hbm_bytes = slot_bytes + value_bytes;
      hbm_left -= p.hbm_bytes;
    } else if (slot_bytes <= hbm_left && value_bytes <= hbm_left - slot_bytes + host_left) {
      p.mode = MemoryMode::kHybrid;
      p.max_hbm_for_values = (hbm_left - slot_bytes) / row_bytes * row_bytes;
      p.hbm_bytes = slot_bytes + p.max_hbm_for_values;
      p.host_bytes = value_bytes - p.max_hbm_for_values;
      hbm_left -= p.hbm_bytes;
      host_left -= p.host_bytes;
    } else {
      // An HBM cache of whole buckets over a host tier that holds every row of this rank.
      p.mode = MemoryMode::kCaching;
      p.tier_rows = p.rows_per_rank;
      const uint64_t per_slot = kSlotOverheadBytes + row_bytes;
      p.capacity = hbm_left / per_slot / p.config.bucket_capacity * p.config.bucket_capacity;
      p.hbm_bytes = p.capacity * per_slot;
      p.host_bytes = p.tier_rows * (sizeof(uint64_t) * 2 + row_bytes);  // key, score, row
      p.fits = p.capacity > 0 && p.host_bytes <= host_left;
      hbm_left -= p.hbm_bytes;
      host_left -= std::min(host_left, p.host_bytes);
    }
    plan.hbm_bytes += p.hbm_bytes;
    plan.host_bytes += p.host_bytes;
    plan.fits = plan.fits && p.fits;
  }
  return plan;
}

std::string ShardingPlan::to_table() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "sharding plan: %u ranks (%s), per rank: HBM budget %s, host budget %s\n",
                budget.world_size, dynemb::to_string(budget.backend).c_str(),
                bytes_text(budget.hbm_bytes).c_str(), bytes_text(budget.host_bytes).c_str());
  out += line;
  std::snprintf(line, sizeof line, "%-16s %14s %5s %-16s %7s %-8s %12s %12s %11s %11s %s\n",
                "table", "rows", "dim", "optimizer", "row B", "mode", "rows/rank", "slots/rank",
                "HBM/rank", "host/rank", "");
  out += line;
  for (const TablePlan& p : tables) {
    std::snprintf(line, sizeof line, "%-16s %14llu %5u %-16s %7u %-8s %12llu %12llu %11s %11s %s\n",
                  p.config.name.c_str(), static_cast<unsigned long long>(p.config.rows),
                  p.config.dim, dynemb::to_string(p.config.optimizer).c_str(),
                  static_cast<unsigned>(p.row_floats * sizeof(float)), to_string(p.mode).c_str(),
                  static_cast<unsigned long long>(p.rows_per_rank),
                  static_cast<unsigned long long>(p.capacity), bytes_text(p.hbm_bytes).c_str(),
                  bytes_text(p.host_bytes).c_str(), p.fits ? "" : "DOES NOT FIT");
    out += line;
  }
  std::snprintf(line, sizeof line, "total per rank: HBM %s of %s, host %s of %s%s\n",
                bytes_text(hbm_bytes).c_str(), bytes_text(budget.hbm_bytes).c_str(),
                bytes_text(host_bytes).c_str(), bytes_text(budget.host_bytes).c_str(),
                fits ? "" : " -- the plan does not fit: add ranks or memory");
  out += line;
  return out;
}

EmbeddingOptions apply_plan(const TablePlan& plan, EmbeddingOptions base) {
  require(plan.capacity > 0, "apply_plan", "plan.capacity", "0",
          "> 0 (table \"" + plan.config.name + "\" got no HBM at all)");
  base.dim = plan.config.dim;
  base.optimizer.kind = plan.config.optimizer;
  base.align_rows = plan.config.align_rows;
  base.table.bucket_capacity = plan.config.bucket_capacity;
  base.table.max_load_factor = plan.config.max_load_factor;
  base.table.init_capacity = plan.capacity;
  base.table.max_capacity = plan.capacity;
  if (plan.mode == MemoryMode::kHybrid) base.table.max_hbm_for_values = plan.max_hbm_for_values;
  return base;
}

}  // namespace dynemb::dist

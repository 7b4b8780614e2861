// The sharding planner: capacities that hold the busiest rank's keys, modes chosen by budget,
// budgets respected, the printed table.
#include <gtest/gtest.h>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/dist/planner.hpp"
#include "dynemb/embedding/embedding_collection.hpp"

namespace dynemb::dist {
namespace {

constexpr uint64_t GiB = 1ull << 30, MiB = 1ull << 20;

std::vector<PlanTableConfig> three_tables() {
  return {{"user", 50'000'000, 64, OptimizerKind::kAdam},
          {"item", 2'000'000, 32, OptimizerKind::kRowWiseAdaGrad},
          {"small", 10'000, 16, OptimizerKind::kSgd}};
}

TEST(DistPlanner, CapacitiesHoldTheBusiestRanksKeys) {
  dynemb::testing::TestRng rng;
  const uint32_t world = static_cast<uint32_t>(rng.uniform(1, 8));
  const uint64_t rows = rng.uniform(1000, 200000);
  const auto plan = plan_sharding({{"t", rows, 8, OptimizerKind::kAdam, 128, 0.5}},
                                  {world, Backend::kCuda, 64 * GiB, 64 * GiB});
  const TablePlan& p = plan.tables[0];
  EXPECT_EQ(p.capacity % 128, 0u);
  EXPECT_GE(p.capacity * 0.5, static_cast<double>(p.rows_per_rank));
  EXPECT_GE(p.rows_per_rank * world, rows);
  // Route `rows` random keys as the sharded collection does: no rank gets more than planned.
  std::vector<uint64_t> per_rank(world);
  for (uint64_t i = 0; i < rows; ++i) ++per_rank[rank_of_key_bits(rng.next(), world)];
  for (uint32_t r = 0; r < world; ++r) EXPECT_LE(per_rank[r], p.rows_per_rank) << "rank " << r;
  EXPECT_EQ(p.mode, MemoryMode::kHbm);
  EXPECT_EQ(p.row_floats, 28u);  // 8 + Adam's 2 * 8 + 1, aligned to 4
  EXPECT_EQ(p.hbm_bytes, p.capacity * (kSlotOverheadBytes + 28 * 4));
}

TEST(DistPlanner, ModesFollowTheBudgets) {
  const auto tables = three_tables();
  // Plenty of HBM: all in HBM.
  auto big = plan_sharding(tables, {8, Backend::kCuda, 80 * GiB, 400 * GiB});
  for (const auto& p : big.tables) EXPECT_EQ(p.mode, MemoryMode::kHbm) << p.config.name;
  EXPECT_TRUE(big.fits);
  // 2 GiB of HBM: the small tables stay, the big one spills its values to host (hybrid).
  auto mid = plan_sharding(tables, {8, Backend::kCuda, 2 * GiB, 64 * GiB});
  EXPECT_EQ(mid.tables[2].mode, MemoryMode::kHbm);
  EXPECT_EQ(mid.tables[1].mode, MemoryMode::kHbm);
  EXPECT_EQ(mid.tables[0].mode, MemoryMode::kHybrid);
  const TablePlan& user = mid.tables[0];
  EXPECT_EQ(user.hbm_bytes - user.max_hbm_for_values + user.max_hbm_for_values + user.host_bytes,
            user.capacity * (kSlotOverheadBytes + user.row_floats * 4));
  EXPECT_LE(mid.hbm_bytes, 2 * GiB);
  EXPECT_LE(mid.host_bytes, 64 * GiB);
  EXPECT_TRUE(mid.fits);
  // 200 MiB of HBM: the big table's slots do not fit; it caches over a host tier.
  auto small = plan_sharding(tables, {8, Backend::kCuda, 200 * MiB, 64 * GiB});
  EXPECT_EQ(small.tables[0].mode, MemoryMode::kCaching);
  EXPECT_GT(small.tables[0].capacity, 0u);
  EXPECT_EQ(small.tables[0].capacity % 128, 0u);
  EXPECT_EQ(small.tables[0].tier_rows, small.tables[0].rows_per_rank);
  EXPECT_LE(small.hbm_bytes, 200 * MiB);
  EXPECT_TRUE(small.fits);
  // Too little host memory for the tier: flagged, not hidden.
  auto none = plan_sharding(tables, {2, Backend::kCuda, 200 * MiB, 1 * GiB});
  EXPECT_FALSE(none.fits);
  EXPECT_NE(none.to_table().find("DOES NOT FIT"), std::string::npos);
  // CPU: host memory only.
  auto cpu = plan_sharding(tables, {3, Backend::kCpu, 0, 256 * GiB});
  for (const auto& p : cpu.tables) EXPECT_EQ(p.mode, MemoryMode::kHost);
  EXPECT_LE(cpu.host_bytes, 256 * GiB);
  const std::string text = mid.to_table();
  std::cout << text;
  for (const char* s : {"user", "item", "small", "hybrid", "hbm", "adam", "slots/rank"}) {
    EXPECT_NE(text.find(s), std::string::npos) << s;
  }
}

TEST(DistPlanner, AppliedPlansMakeTables) {
  auto plan =
      plan_sharding({{"a", 5000, 8, OptimizerKind::kAdam}, {"b", 3000, 8, OptimizerKind::kAdam}},
                    {2, Backend::kCpu, 0, GiB});
  std::vector<EmbeddingOptions> options;
  for (const auto& p : plan.tables) options.push_back(apply_plan(p, {}));
  for (const auto& o : options) EXPECT_NO_THROW(validate_embedding_options(o));
  EmbeddingCollection<int64_t> collection(Backend::kCpu, options);
  EXPECT_EQ(collection.table(0).capacity(), plan.tables[0].capacity);
}

TEST(DistPlanner, BadInputNamesTheTableAndField) {
  try {
    plan_sharding({{"ok", 10, 8}, {"broken", 10, 0}}, {1, Backend::kCpu, 0, GiB});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("\"broken\").dim"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_sharding({{"t", 0, 8}}, {1}), InvalidArgument);
  EXPECT_THROW(plan_sharding({{"t", 10, 8, OptimizerKind::kSgd, 100}}, {1}), InvalidArgument);
  EXPECT_THROW(plan_sharding({{"t", 10, 8}}, {0}), InvalidArgument);
}

}  // namespace
}  // namespace dynemb::dist

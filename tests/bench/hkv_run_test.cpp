// dynemb bench table --hkv-output: HKV's benchmark output from the same device call, read into
// per-cell figures and matched to dynemb's ops by dim, capacity, load factor and mode.
#include "bench/table/hkv_run.hpp"

#include <gtest/gtest.h>

#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb::bench {
namespace {

// The shape hkv_benchmark prints (an H200 run of 2026-11-25, dim 64, pure HBM; part b added).
const std::string kHbmOutput =
    "## HKV ae24eec benchmark: NVIDIA H200, mode hbm, dim 64, capacity 64M, HBM for values 16 "
    "GB, host 0 GB, 1M keys per op, LRU, B-KV/s\n"
    "\n"
    "|    \u03BB | insert_or_assign |   find | find_or_insert | assign |  find* | find_or_insert* "
    "| insert_and_evict |\n"
    "|-----:|-----------------:|-------:|---------------:|-------:|-------:|----------------:|----"
    "-------------:|\n"
    "| 0.50 |            1.849 |  3.603 |          1.911 |  2.818 |  7.202 |           2.438 |     "
    "       1.552 |\n"
    "| 0.75 |            1.778 |  3.667 |          1.790 |  2.815 |  6.428 |           2.305 |     "
    "       1.469 |\n"
    "| 1.00 |            1.322 |  3.652 |          1.304 |  2.862 |  4.711 |           1.377 |     "
    "       0.834 |\n"
    "\n"
    "|    \u03BB | export_batch | export_batch_if |  contains |\n"
    "|-----:|-------------:|----------------:|----------:|\n"
    "| 0.50 |        0.512 |           0.433 |     4.401 |\n";

constexpr uint64_t k64M = uint64_t{64} << 20;

TEST(HkvRun, ReadsTheHeaderAndEveryFigure) {
  const HkvRun run = parse_hkv_run(kHbmOutput, "hkv-64.txt");
  EXPECT_EQ(run.path, "hkv-64.txt");
  EXPECT_EQ(run.gpu, "NVIDIA H200");
  EXPECT_EQ(run.mode, "hbm");
  EXPECT_EQ(run.dim, 64u);
  EXPECT_EQ(run.capacity, k64M);
  EXPECT_DOUBLE_EQ(run.hbm_gb, 16.0);
  ASSERT_EQ(run.figures.size(), 3u);
  EXPECT_DOUBLE_EQ(run.figures.at("0.50").at("find_or_insert*"), 2.438);
  EXPECT_DOUBLE_EQ(run.figures.at("1.00").at("insert_and_evict"), 0.834);
  EXPECT_DOUBLE_EQ(run.figures.at("0.50").at("contains"), 4.401);
  EXPECT_EQ(run.figures.at("0.75").count("contains"), 0u);
}

TEST(HkvRun, MatchesCellsByDimCapacityLoadFactorAndMode) {
  const std::vector<HkvRun> runs{parse_hkv_run(kHbmOutput, "hkv-64.txt")};
  // Both pointer ops stand against find_or_insert*; find_or_insert_given against find_or_insert.
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 0.75, TableOp::kFindOrInsertPointers, std::nullopt),
            2.305);
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 0.75, TableOp::kFindOrReservePointers, std::nullopt),
            2.305);
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 1.0, TableOp::kFindOrInsertGiven, std::nullopt), 1.304);
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 0.5, TableOp::kFindPointers, std::nullopt), 7.202);
  // A budget that holds every value is pure HBM too.
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 0.5, TableOp::kFind, 64.0), 3.603);
  // Another dim, capacity, load factor or mode, or an op HKV lacks: none.
  EXPECT_EQ(hkv_same_run(runs, 32, k64M, 0.5, TableOp::kFind, std::nullopt), std::nullopt);
  EXPECT_EQ(hkv_same_run(runs, 64, 2 * k64M, 0.5, TableOp::kFind, std::nullopt), std::nullopt);
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 0.6, TableOp::kFind, std::nullopt), std::nullopt);
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 0.5, TableOp::kFind, 8.0), std::nullopt);
  EXPECT_EQ(hkv_same_run(runs, 64, k64M, 0.5, TableOp::kErase, std::nullopt), std::nullopt);
}

TEST(HkvRun, HybridRunsMatchTheirHbmBudget) {
  std::string hybrid = kHbmOutput;
  hybrid.replace(hybrid.find("mode hbm"), 8, "mode hybrid");
  hybrid.replace(hybrid.find("capacity 64M"), 12, "capacity 128M");
  const std::vector<HkvRun> runs{parse_hkv_run(hybrid, "hkv-hybrid.txt")};
  EXPECT_EQ(hkv_same_run(runs, 64, 2 * k64M, 0.5, TableOp::kFind, 16.0), 3.603);
  EXPECT_EQ(hkv_same_run(runs, 64, 2 * k64M, 0.5, TableOp::kFind, 8.0), std::nullopt);
  EXPECT_EQ(hkv_same_run(runs, 64, 2 * k64M, 0.5, TableOp::kFind, std::nullopt), std::nullopt);
}

TEST(HkvRun, OutputsWithoutHeaderOrFiguresAreRefusedByName) {
  try {
    parse_hkv_run("| 0.50 | 1.0 |\n", "empty.txt");
    FAIL() << "no header accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--hkv-output empty.txt"), std::string::npos) << e.what();
  }
  const std::string header_only = kHbmOutput.substr(0, kHbmOutput.find('\n') + 1);
  EXPECT_THROW(parse_hkv_run(header_only, "header.txt"), InvalidArgument);
  EXPECT_THROW(read_hkv_runs({"/nonexistent/hkv.txt"}), InvalidArgument);
}

}  // namespace
}  // namespace dynemb::bench

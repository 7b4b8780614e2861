// HKV's own figures on an H100 (bench/table/hkv_anchors.json, from ANCHORS.md), for our/HKV
// ratios of CUDA runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "bench/table/table_op.hpp"

namespace dynemb::bench {

// Where the anchors come from ("ANCHORS.md, HKV ae24eec, H100 80GB HBM3").
std::string hkv_anchor_source();

// HKV's B-KV/s for `op` at exactly this dim, capacity and load factor, in pure-HBM mode
// (no budget, or a budget that holds every value) or in hybrid mode with the same HBM budget
// in GB; nullopt where HKV has no such figure.
std::optional<double> hkv_anchor(uint32_t dim, uint64_t capacity, double load_factor, TableOp op,
                                 std::optional<double> hbm_budget_gb);

}  // namespace dynemb::bench

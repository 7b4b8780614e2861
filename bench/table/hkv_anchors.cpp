#include "bench/table/hkv_anchors.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "hkv_anchors_json.hpp"

namespace dynemb::bench {
namespace {

// HKV's name for op. HKV's find_or_insert inserts the caller's rows, as find_or_insert_given
// does; its figure is the bar for both of ours (find_or_insert draws its rows from the
// initializer instead).
std::string hkv_op_name(TableOp op) {
  return std::string(op_name(op == TableOp::kFindOrInsertGiven ? TableOp::kFindOrInsert : op));
}

const nlohmann::json& anchors() {
  static const nlohmann::json parsed = nlohmann::json::parse(detail::kHkvAnchorsJson);
  return parsed;
}

}  // namespace

std::string hkv_anchor_source() {
  return anchors().at("source").get<std::string>();
}

std::optional<double> hkv_anchor(uint32_t dim, uint64_t capacity, double load_factor, TableOp op,
                                 std::optional<double> hbm_budget_gb) {
  const double value_bytes = double(capacity) * dim * sizeof(float);
  const bool hybrid = hbm_budget_gb && *hbm_budget_gb * 1073741824.0 < value_bytes;
  for (const auto& config : anchors().at("configs")) {
    if (config.at("dim").get<uint32_t>() != dim) continue;
    if (config.at("capacity").get<uint64_t>() != capacity) continue;
    if ((config.at("mode").get<std::string>() == "hybrid") != hybrid) continue;
    if (hybrid && std::abs(config.at("hbm_budget_gb").get<double>() - *hbm_budget_gb) > 1e-9) {
      continue;
    }
    for (const auto& [lf, figures] : config.at("load_factors").items()) {
      if (std::abs(std::stod(lf) - load_factor) > 1e-9) continue;
      const auto it = figures.find(hkv_op_name(op));
      if (it != figures.end()) return it->get<double>();
    }
  }
  return std::nullopt;
}

}  // namespace dynemb::bench

#include "bench/table/pcie_floor.hpp"

#include <algorithm>
#include <cmath>

#include "bench/table/config.hpp"

namespace dynemb::bench {

double host_row_share(uint64_t capacity, uint32_t dim, double hbm_bytes) {
  if (capacity == 0) return 0.0;
  const double hbm_rows = std::floor(hbm_bytes / (4.0 * dim));
  return std::clamp(1.0 - hbm_rows / static_cast<double>(capacity), 0.0, 1.0);
}

PcieBytes pcie_bytes(TableOp op, uint64_t batch, uint32_t dim, double host_share) {
  const double row = 4.0 * dim * host_share;
  const double present = kPresentFraction * static_cast<double>(batch) * row;
  const double fresh = (1.0 - kPresentFraction) * static_cast<double>(batch) * row;
  switch (op) {
    case TableOp::kFind:
      return {present, 0.0};
    case TableOp::kAssign:
      return {0.0, present};
    case TableOp::kInsertOrAssign:
      return {0.0, present + fresh};
    case TableOp::kFindOrInsert:
      return {present, fresh};
    case TableOp::kFindOrInsertPointers:
      return {0.0, fresh};  // new rows initialized in place; stored rows are not touched
    case TableOp::kAccumOrAssign:
      return {present, present + fresh};
    case TableOp::kInsertAndEvict:
      return {0.0, present + fresh};  // plus the victims' rows read at max capacity
    default:
      return {0.0, 0.0};
  }
}

double pcie_floor_seconds(const PcieBytes& bytes, const PcieBandwidth& bandwidth) {
  const double in = bandwidth.host_to_device > 0 ? bytes.read / bandwidth.host_to_device : 0.0;
  const double out = bandwidth.device_to_host > 0 ? bytes.written / bandwidth.device_to_host : 0.0;
  return std::max(in, out);
}

std::optional<double> random_row_floor_seconds(const PcieBytes& bytes,
                                               const PcieBandwidth& bandwidth, uint32_t dim) {
  const auto it = bandwidth.random_rows.find(dim);
  if (it == bandwidth.random_rows.end()) return std::nullopt;
  const double in = it->second.read > 0 ? bytes.read / it->second.read : 0.0;
  const double out = it->second.write > 0 ? bytes.written / it->second.write : 0.0;
  return std::max(in, out);
}

}  // namespace dynemb::bench

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

PcieBytes pcie_bytes(TableOp op, uint64_t batch, uint32_t dim, double host_share,
                     double load_factor) {
  const double row = 4.0 * dim * host_share;
  const double present = kPresentFraction * static_cast<double>(batch) * row;
  const double fresh = (1.0 - kPresentFraction) * static_cast<double>(batch) * row;
  switch (op) {
    case TableOp::kFind:
      return {present, 0.0, present};
    case TableOp::kAssign:
      return {0.0, present, present};
    case TableOp::kInsertOrAssign:
      return {0.0, present + fresh, present + fresh};
    case TableOp::kFindOrInsert:
    case TableOp::kFindOrInsertGiven:  // stored rows out, new rows in (drawn or the caller's)
      return {present, fresh, present + fresh};
    case TableOp::kFindOrInsertPointers:
      return {0.0, fresh, fresh};  // new rows initialized in place; stored rows are not touched
    case TableOp::kFindOrReservePointers:
      return {0.0, 0.0};  // no row touched
    case TableOp::kAccumOrAssign:
      return {present, present + fresh, present + fresh};  // present rows read and written back
    case TableOp::kInsertAndEvict:
      // A full table: each new key's victim row is read out before the new row replaces it.
      return {load_factor >= 1.0 ? fresh : 0.0, present + fresh, present + fresh};
    default:
      return {0.0, 0.0};
  }
}

namespace {

// Seconds for `bytes` when reads move at read_rate and writes at write_rate (bytes per second; 0:
// not measured, no bound): the link is full duplex, so the slower direction bounds the call.
double slower_direction(const PcieBytes& bytes, double read_rate, double write_rate) {
  const double in = read_rate > 0 ? bytes.read / read_rate : 0.0;
  const double out = write_rate > 0 ? bytes.written / write_rate : 0.0;
  return std::max(in, out);
}

}  // namespace

double pcie_floor_seconds(const PcieBytes& bytes, const PcieBandwidth& bandwidth) {
  return slower_direction(bytes, bandwidth.host_to_device, bandwidth.device_to_host);
}

std::optional<double> random_row_floor_seconds(const PcieBytes& bytes,
                                               const PcieBandwidth& bandwidth, uint32_t dim) {
  const auto it = bandwidth.random_rows.find(dim);
  if (it == bandwidth.random_rows.end()) return std::nullopt;
  const RandomRowRate& rate = it->second;
  const bool mixed = bytes.read > 0 && bytes.written > 0 && rate.both > 0;
  const double together = mixed ? bytes.touched / rate.both : 0.0;
  return std::max(slower_direction(bytes, rate.read, rate.write), together);
}

}  // namespace dynemb::bench

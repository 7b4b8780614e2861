#include "bench/table/peer_scenario.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <string>

#include "bench/table/bench_clock.hpp"
#include "bench/table/peer_dims.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::bench {
namespace {

template <uint32_t... D>
bool dim_in(uint32_t dim, std::integer_sequence<uint32_t, D...>) {
  return ((dim == D) || ...);
}

template <uint32_t... D>
std::string dims_list(std::integer_sequence<uint32_t, D...>) {
  std::string out;
  ((out += (out.empty() ? "" : ", ") + std::to_string(D)), ...);
  return out;
}

}  // namespace

bool peer_dim_supported(uint32_t dim) {
  return dim_in(dim, detail::PeerDims{});
}

std::string peer_dims_list() {
  return dims_list(detail::PeerDims{});
}

bool peer_has_op(TableOp op) {
  switch (op) {
    case TableOp::kFind:
    case TableOp::kInsertOrAssign:
    case TableOp::kFindOrInsert:
    case TableOp::kAssign:
    case TableOp::kContains:
    case TableOp::kErase:
    case TableOp::kExport:
      return true;
    default:
      return false;
  }
}

OpTimings run_peer_scenario(PeerMap& peer, const TableBenchConfig& config, uint32_t dim,
                            uint64_t capacity, const std::vector<uint64_t>& stored,
                            const TimedBatch& batch) {
  const size_t n = batch.keys.size();
  std::vector<float> values(n * dim);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 1024) / 1024.0f;
  std::unique_ptr<bool[]> founds(new bool[n]);
  std::vector<uint64_t> export_keys(n);

  for (size_t offset = 0; offset < stored.size(); offset += n) {
    peer.insert_or_assign(std::min(n, stored.size() - offset), stored.data() + offset,
                          values.data());
  }
  // Undoes what the last call changed: new keys inserted, present keys erased.
  bool dirty = false;
  auto restore = [&] {
    if (!dirty) return;
    dirty = false;
    peer.erase(batch.new_keys.size(), batch.new_keys.data());
    peer.insert_or_assign(batch.present_keys.size(), batch.present_keys.data(), values.data());
    if (peer.size() != stored.size()) {
      throw StateError("dynemb bench table: " + peer.name() + " holds " +
                       std::to_string(peer.size()) + " keys after restoring, expected " +
                       std::to_string(stored.size()));
    }
  };

  OpTimings timings;
  for (TableOp op : config.ops) {
    if (!peer_has_op(op)) continue;
    OpTiming best{std::numeric_limits<double>::infinity(), 0};
    for (uint32_t run = 0; run < config.repeats; ++run) {
      restore();
      dirty =
          op == TableOp::kInsertOrAssign || op == TableOp::kFindOrInsert || op == TableOp::kErase;
      uint64_t pairs = n;
      const double cpu_before = process_cpu_seconds();
      const auto begin = std::chrono::steady_clock::now();
      switch (op) {
        case TableOp::kFind:
          peer.find(n, batch.keys.data(), values.data(), founds.get());
          break;
        case TableOp::kInsertOrAssign:
          peer.insert_or_assign(n, batch.keys.data(), values.data());
          break;
        case TableOp::kFindOrInsert:
          peer.find_or_insert(n, batch.keys.data(), values.data(), founds.get());
          break;
        case TableOp::kAssign:
          peer.assign(n, batch.keys.data(), values.data());
          break;
        case TableOp::kContains:
          peer.contains(n, batch.keys.data(), founds.get());
          break;
        case TableOp::kErase:
          peer.erase(n, batch.keys.data());
          break;
        case TableOp::kExport:
          peer.export_all(n, export_keys.data(), values.data());
          pairs = capacity;
          break;
        default:
          break;
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      const double cpu_seconds = process_cpu_seconds() - cpu_before;
      if (seconds < best.seconds) best = {seconds, pairs, cpu_seconds};
    }
    timings[op] = best;
  }
  return timings;
}

}  // namespace dynemb::bench

// The value widths the peers are compiled for, and the dispatch from a runtime dim to them.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "bench/table/peer_map.hpp"

namespace dynemb::bench::detail {

// Peer value types are std::array<float, D> for D in this list.
using PeerDims = std::integer_sequence<uint32_t, 4, 8, 16, 32, 64, 128, 256>;

// Calls make.template operator()<D>() for the D equal to `dim`; nullptr when none is.
template <class Make, uint32_t... D>
std::unique_ptr<PeerMap> make_for_dim(uint32_t dim, Make&& make,
                                      std::integer_sequence<uint32_t, D...>) {
  std::unique_ptr<PeerMap> out;
  ((dim == D ? (out = make.template operator()<D>(), true) : false) || ...);
  return out;
}

// Runs body(begin, end) over [0, n) split into `threads` contiguous ranges, one thread each.
template <class Body>
void parallel_ranges(size_t n, uint32_t threads, const Body& body) {
  const size_t parts = std::max<size_t>(1, std::min<size_t>(threads, n));
  if (parts == 1) {
    body(size_t{0}, n);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(parts - 1);
  for (size_t p = 1; p < parts; ++p) {
    workers.emplace_back([&, p] { body(n * p / parts, n * (p + 1) / parts); });
  }
  body(size_t{0}, n / parts);
  for (std::thread& w : workers) w.join();
}

}  // namespace dynemb::bench::detail

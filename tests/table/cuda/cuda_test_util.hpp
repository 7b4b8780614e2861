// Helpers of the CUDA table tests: fresh random keys, device buffers filled from host vectors,
// and a full dump of a table's contents for comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::testing {

// Skips the test when this binary has no CUDA backend or no GPU is visible.
#define DYNEMB_REQUIRE_CUDA()                                                  \
  do {                                                                         \
    if (!::dynemb::cuda_backend_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// n random keys, none reserved and none in `seen` (each is added to it).
inline std::vector<uint64_t> distinct_keys(TestRng& rng, size_t n, std::set<uint64_t>& seen) {
  std::vector<uint64_t> keys;
  while (keys.size() < n) {
    const uint64_t k = rng.next();
    if (k < kFirstReservedKey && seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

// A buffer in `backend`'s memory holding a copy of `host`.
template <class T>
BackendBuffer<T> upload(Backend backend, const std::vector<T>& host) {
  BackendBuffer<T> buffer(backend, host.size());
  if (!host.empty()) buffer.upload(host.data(), host.size());
  return buffer;
}

// The first `count` elements of a backend buffer, on the host.
template <class T>
std::vector<T> download(const BackendBuffer<T>& buffer, size_t count) {
  std::vector<T> host(count);
  if (count > 0) buffer.download(host.data(), count);
  return host;
}

// The first `count` flags of a bool buffer in `backend`'s memory (as bytes: no packed bools).
inline std::vector<uint8_t> download_flags(Backend backend, const BackendBuffer<bool>& buffer,
                                           size_t count) {
  std::vector<uint8_t> host(count);
  if (count > 0) copy_from_backend(backend, host.data(), buffer.data(), count);
  return host;
}

// One stored row.
struct StoredRow {
  std::vector<float> row;
  uint64_t score = 0;
  bool operator==(const StoredRow&) const = default;
};

// Every stored (key -> row, score) of a table, through for_each.
template <TableKey K>
std::map<K, StoredRow> dump(Table<K>& table) {
  std::map<K, StoredRow> out;
  table.for_each([&](K key, std::span<const float> row, uint64_t score) {
    out[key] = StoredRow{std::vector<float>(row.begin(), row.end()), score};
  });
  return out;
}

}  // namespace dynemb::testing

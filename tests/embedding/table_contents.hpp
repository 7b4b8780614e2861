// The rows, found flags and scores a table holds for some keys, read back to the host: what the
// collection tests compare between two tables.
#pragma once

#include <cstdint>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb::embedding_test {

// Rows and scores a table holds for `keys` (absent: the row reads what find leaves there).
struct Contents {
  std::vector<float> rows;
  std::vector<uint8_t> found;
  std::vector<uint64_t> scores;
};

// Looks every key up with find on `backend` and copies the results to the host.
template <class K>
Contents contents(Backend backend, Table<K>& table, const std::vector<K>& keys) {
  const uint32_t d = table.dim();
  auto k = ops_test::upload(backend, keys);
  BackendBuffer<float> rows(backend, keys.size() * d + 1);
  BackendBuffer<uint8_t> found(backend, keys.size() + 1);
  BackendBuffer<uint64_t> scores(backend, keys.size() + 1);
  table.find(keys.size(), k.data(), rows.data(), reinterpret_cast<bool*>(found.data()),
             scores.data(), nullptr);
  backend_synchronize(backend);
  return {ops_test::download(rows, keys.size() * d), ops_test::download(found, keys.size()),
          ops_test::download(scores, keys.size())};
}

}  // namespace dynemb::embedding_test

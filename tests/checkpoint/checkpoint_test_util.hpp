// Helpers of the checkpoint tests: temporary directories, random tables, snapshots of a table's
// whole contents as a std::map (the reference every round trip is compared with).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::testing {

// A directory removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("dynemb-ckpt-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// One stored row as the reference sees it.
struct StoredRow {
  std::vector<float> value;
  uint64_t score = 0;
  bool operator==(const StoredRow& o) const {
    // Bit-exact comparison (NaN payloads included).
    return score == o.score && value.size() == o.value.size() &&
           std::memcmp(value.data(), o.value.data(), value.size() * sizeof(float)) == 0;
  }
};

// Short failure output: the score and the first floats.
inline void PrintTo(const StoredRow& row, std::ostream* os) {
  *os << "{score " << row.score << ", " << row.value.size() << " floats:";
  for (size_t j = 0; j < row.value.size() && j < 4; ++j) *os << " " << row.value[j];
  *os << (row.value.size() > 4 ? " ...}" : "}");
}

template <TableKey K>
using Snapshot = std::map<K, StoredRow>;

// Every row of the table (on any backend).
template <TableKey K>
Snapshot<K> snapshot(Table<K>& table) {
  Snapshot<K> s;
  table.for_each([&](K key, std::span<const float> value, uint64_t score) {
    s[key] = StoredRow{std::vector<float>(value.begin(), value.end()), score};
  });
  return s;
}

// Options of a small table that never evicts in these tests.
inline TableOptions small_table_options(uint32_t dim, ScorePolicy policy,
                                        uint64_t max_capacity = 1u << 16) {
  TableOptions o;
  o.dim = dim;
  o.init_capacity = 1024;
  o.max_capacity = max_capacity;
  o.bucket_capacity = 128;
  o.score_policy = policy;
  o.num_threads = 1;
  return o;
}

// Inserts n fresh random keys with random rows; gives them random scores (assign_scores) when
// `random_scores`. Returns the keys.
template <TableKey K>
std::vector<K> fill_random(Table<K>& table, TestRng& rng, size_t n, bool random_scores) {
  std::set<K> seen;
  std::vector<K> keys;
  while (keys.size() < n) {
    const K key = static_cast<K>(rng.next());
    if (!is_reserved_key(key) && seen.insert(key).second) keys.push_back(key);
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> values(n * table.dim());
  for (float& v : values) v = u(rng.engine());
  BackendBuffer<K> k(table.backend(), n);
  BackendBuffer<float> v(table.backend(), values.size());
  k.upload(keys.data(), n);
  v.upload(values.data(), values.size());
  table.insert_or_assign(n, k.data(), v.data());
  if (random_scores) {
    std::vector<uint64_t> scores(n);
    for (uint64_t& s : scores) s = rng.uniform(1, uint64_t(1) << 40);
    BackendBuffer<uint64_t> sc(table.backend(), n);
    sc.upload(scores.data(), n);
    table.assign_scores(n, k.data(), sc.data());
  }
  return keys;
}

// Overwrites `keys` with fresh random rows (scores by the table's policy).
template <TableKey K>
void overwrite_random(Table<K>& table, TestRng& rng, const std::vector<K>& keys) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> values(keys.size() * table.dim());
  for (float& v : values) v = u(rng.engine());
  BackendBuffer<K> k(table.backend(), keys.size());
  BackendBuffer<float> v(table.backend(), values.size());
  k.upload(keys.data(), keys.size());
  v.upload(values.data(), values.size());
  table.insert_or_assign(keys.size(), k.data(), v.data());
}

}  // namespace dynemb::testing

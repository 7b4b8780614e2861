// Helpers of the tests of batches full of copies of a few hot keys (cuda_copies_test.cpp,
// cuda_copy_joins_test.cpp): the table both start from, random rows, and each writing call made
// on a CUDA table and on a one-thread CPU table (the batch-order reference) with the same keys.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing::copies {

inline constexpr uint32_t kDim = 16;

// A table of kDim floats a row, 128-slot buckets growing at load 0.75 from init_capacity,
// STEP scores, refusals counted (not thrown), and one CPU thread, so that the CPU table applies
// a batch in order.
inline TableOptions copies_table_options(uint64_t max_capacity, uint64_t init_capacity) {
  TableOptions o;
  o.dim = kDim;
  o.bucket_capacity = 128;
  o.max_capacity = max_capacity;
  o.init_capacity = init_capacity;
  o.max_load_factor = 0.75;
  o.score_policy = ScorePolicy::kStep;
  o.safe_check = SafeCheck::kIgnore;
  o.num_threads = 1;
  return o;
}

// Puts the keys in a uniformly random order.
inline void shuffle_keys(TestRng& rng, std::vector<uint64_t>& keys) {
  for (size_t i = keys.size(); i > 1; --i) std::swap(keys[i - 1], keys[rng.uniform(0, i - 1)]);
}

// n random rows of kDim floats (multiples of 1/64, exact in float).
inline std::vector<float> random_rows(TestRng& rng, size_t n) {
  std::vector<float> v(n * kDim);
  for (float& x : v) x = static_cast<float>(rng.uniform(0, 1 << 20)) / 64.0f;
  return v;
}

// Row i of rows of kDim floats.
inline std::vector<float> row_at(const std::vector<float>& rows, size_t i) {
  return {rows.begin() + i * kDim, rows.begin() + (i + 1) * kDim};
}

// What one call gave on both tables: per position, rows (kDim floats each) or addresses, and the
// founds (the CUDA table's downloaded as bytes).
template <class V>
struct BothOutputs {
  std::vector<V> gpu;
  std::vector<uint8_t> gpu_founds;
  std::vector<V> cpu;
  std::unique_ptr<bool[]> cpu_founds;
};

// find_or_insert of `keys` on both tables.
inline BothOutputs<float> find_or_insert_both(Table<uint64_t>& gpu, Table<uint64_t>& cpu,
                                              const std::vector<uint64_t>& keys) {
  const size_t n = keys.size();
  auto k = upload(Backend::kCuda, keys);
  BackendBuffer<float> v(Backend::kCuda, n * kDim);
  BackendBuffer<bool> f(Backend::kCuda, n);
  gpu.find_or_insert(n, k.data(), v.data(), f.data());
  BothOutputs<float> out{{}, {}, std::vector<float>(n * kDim), std::make_unique<bool[]>(n)};
  cpu.find_or_insert(n, keys.data(), out.cpu.data(), out.cpu_founds.get());
  out.gpu = download(v, n * kDim);
  out.gpu_founds = download_flags(Backend::kCuda, f, n);
  return out;
}

// find_or_insert_pointers of `keys` on both tables (the CUDA addresses point into its memory).
inline BothOutputs<float*> find_or_insert_pointers_both(Table<uint64_t>& gpu, Table<uint64_t>& cpu,
                                                        const std::vector<uint64_t>& keys) {
  const size_t n = keys.size();
  auto k = upload(Backend::kCuda, keys);
  BackendBuffer<float*> p(Backend::kCuda, n);
  BackendBuffer<bool> f(Backend::kCuda, n);
  gpu.find_or_insert_pointers(n, k.data(), p.data(), f.data());
  BothOutputs<float*> out{{}, {}, std::vector<float*>(n), std::make_unique<bool[]>(n)};
  cpu.find_or_insert_pointers(n, keys.data(), out.cpu.data(), out.cpu_founds.get());
  out.gpu = download(p, n);
  out.gpu_founds = download_flags(Backend::kCuda, f, n);
  return out;
}

// find_or_insert_given of `keys` with `rows` offered on both tables: the rows each position
// ended with.
inline BothOutputs<float> find_or_insert_given_both(Table<uint64_t>& gpu, Table<uint64_t>& cpu,
                                                    const std::vector<uint64_t>& keys,
                                                    const std::vector<float>& rows) {
  const size_t n = keys.size();
  auto k = upload(Backend::kCuda, keys);
  auto v = upload(Backend::kCuda, rows);
  BackendBuffer<bool> f(Backend::kCuda, n);
  gpu.find_or_insert_given(n, k.data(), v.data(), f.data());
  BothOutputs<float> out{{}, {}, rows, std::make_unique<bool[]>(n)};
  cpu.find_or_insert_given(n, keys.data(), out.cpu.data(), out.cpu_founds.get());
  out.gpu = download(v, n * kDim);
  out.gpu_founds = download_flags(Backend::kCuda, f, n);
  return out;
}

// insert_or_assign (or, with `assign`, assign) of `keys` with `rows` on both tables.
inline void write_both(Table<uint64_t>& gpu, Table<uint64_t>& cpu,
                       const std::vector<uint64_t>& keys, const std::vector<float>& rows,
                       bool assign) {
  auto k = upload(Backend::kCuda, keys);
  auto v = upload(Backend::kCuda, rows);
  if (assign) {
    gpu.assign(keys.size(), k.data(), v.data());
    cpu.assign(keys.size(), keys.data(), rows.data());
  } else {
    gpu.insert_or_assign(keys.size(), k.data(), v.data());
    cpu.insert_or_assign(keys.size(), keys.data(), rows.data());
  }
}

// The founds and rows of every position agree between the tables; failures name `context` and
// the position.
inline void expect_same_outputs(const BothOutputs<float>& out, size_t n,
                                const std::string& context = "") {
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out.gpu_founds[i] != 0, out.cpu_founds[i]) << context << "position " << i;
    ASSERT_EQ(row_at(out.gpu, i), row_at(out.cpu, i)) << context << "position " << i;
  }
}

// A CUDA table and a CPU table of `o` at 4 buckets, load factor 1, filled at score 10 with new
// keys (added to `seen`) and random rows, one key a call (at max capacity two keys of one call
// sharing a bucket may evict in either order: docs/table_contract.md), until the CUDA table is
// full or 20000 calls were made.
struct FullTables {
  std::unique_ptr<Table<uint64_t>> gpu, cpu;
};
inline FullTables full_tables(TestRng& rng, TableOptions o, std::set<uint64_t>& seen) {
  o.max_capacity = o.init_capacity = 128 * 4;
  o.max_load_factor = 1.0;
  FullTables t{make_table<uint64_t>(Backend::kCuda, o), make_table<uint64_t>(Backend::kCpu, o)};
  t.gpu->set_score(10);
  t.cpu->set_score(10);
  for (int calls = 0; t.gpu->size() < t.gpu->capacity() && calls < 20000; ++calls) {
    const auto keys = distinct_keys(rng, 1, seen);
    write_both(*t.gpu, *t.cpu, keys, random_rows(rng, 1), false);
  }
  return t;
}

// Both tables hold the same keys, each with the same row and score.
inline void expect_same_contents(Table<uint64_t>& gpu, Table<uint64_t>& cpu) {
  const auto g = dump(gpu), c = dump(cpu);
  ASSERT_EQ(g.size(), c.size());
  for (const auto& [key, row] : c) {
    const auto it = g.find(key);
    ASSERT_NE(it, g.end()) << "key " << key << " missing on CUDA";
    ASSERT_EQ(it->second, row) << "key " << key;
  }
}

}  // namespace dynemb::testing::copies

// combine_tables_narrow (every table's batch combined in one pass into the dedup's narrow keys and
// bags) against combine_table_keys on the CPU table by table: the same combined offsets and status
// words, narrow keys equal to the combined keys' low 32 bits, each id's bag; then the dedup of the
// narrow keys (keys = nullptr) against the dedup of
// the combined keys. Random tables, some empty, some with bad offsets. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/ops_backend.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "dynemb/ops/step_workspace.hpp"
#include "dynemb/ops/table_keys.hpp"
#include "dynemb/table/table.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

using ops_test::download;
using ops_test::upload;

constexpr Backend kGpu = Backend::kCuda;

template <class T>
std::vector<T> from_device(const T* p, size_t n) {
  std::vector<T> h(n);
  if (n > 0) copy_from_backend(kGpu, h.data(), p, n * sizeof(T));
  return h;
}

struct Table {
  std::vector<uint64_t> keys;
  std::vector<int64_t> offsets;
};

// Bags of 0 to 7 ids with keys below 2^width; num_bags = 0 gives an empty table.
Table random_table(std::mt19937_64& rng, size_t num_bags, uint32_t width) {
  Table t;
  if (num_bags == 0) return t;
  t.offsets.push_back(0);
  for (size_t b = 0; b < num_bags; ++b) {
    const size_t len = rng() % 8;
    for (size_t j = 0; j < len; ++j) {
      t.keys.push_back(rng() % 3 == 0 ? 5 : rng() & ((uint64_t{1} << width) - 1));
    }
    t.offsets.push_back(static_cast<int64_t>(t.keys.size()));
  }
  return t;
}

class TableKeysNarrow : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(TableKeysNarrow, MatchesTheTableByTableCombineAndItsDedup) {
  dynemb::testing::TestRng test_rng;
  std::mt19937_64& rng = test_rng.engine();
  const OpsBackend& cpu = ops_backend(Backend::kCpu);
  const OpsBackend& gpu = ops_backend(kGpu);
  ops::detail::StepWorkspace narrow_ws(kGpu, 0), wide_ws(kGpu, 0);
  for (int trial = 0; trial < 24; ++trial) {
    const uint32_t num_tables = 1 + static_cast<uint32_t>(rng() % ops::detail::kMaxNarrowTables);
    const uint32_t table_bits = num_tables == 1 ? 0 : std::bit_width(num_tables - 1);
    const uint32_t width = 4 + static_cast<uint32_t>(rng() % (29 - table_bits));  // <= 32 bits
    const uint32_t shift = num_tables == 1 ? 64 : width;
    const int end_bit = static_cast<int>(width + table_bits);
    const bool bad = trial % 4 == 3;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(num_tables) +
                 " tables, width " + std::to_string(width) + (bad ? ", bad offsets" : ""));
    std::vector<Table> tables;
    size_t n = 0, bags = 0;
    for (uint32_t t = 0; t < num_tables; ++t) {
      const size_t num_bags = rng() % 5 == 0 ? 0 : 1 + rng() % (trial < 20 ? 300 : 30000);
      tables.push_back(random_table(rng, num_bags, width));
      n += tables.back().keys.size();
      bags += num_bags;
    }
    if (bad) {
      // One table's offsets decrease, end short or start late.
      Table& t = tables[rng() % num_tables];
      if (t.offsets.size() > 2) {
        const size_t which = rng() % 3;
        if (which == 0) t.offsets[1] = t.offsets.back() + 3;
        if (which == 1) t.offsets.back() -= 1;
        if (which == 2) t.offsets[0] = 1;
      }
    }
    // The reference: the CPU's combine, table by table (host memory).
    std::vector<uint64_t> combined(n + 1), status(ops::detail::kTableKeyStatusWords, 0);
    std::vector<int64_t> offsets(bags + 1, 0);
    std::vector<uint32_t> bag_of(n, 0);
    uint64_t base = 0, bag_base = 0;
    for (uint32_t t = 0; t < num_tables; ++t) {
      const Table& tb = tables[t];
      const size_t num_bags = tb.offsets.empty() ? 0 : tb.offsets.size() - 1;
      ops::detail::combine_table_keys<uint64_t>(
          cpu, t, shift, tb.keys.size(), tb.keys.data(), tb.offsets.data(), num_bags, base,
          bag_base, combined.data(), offsets.data(), status.data(), nullptr);
      for (size_t b = 0; b < num_bags; ++b) {
        for (int64_t i = tb.offsets[b]; i < tb.offsets[b + 1]; ++i) {
          if (i >= 0 && static_cast<size_t>(i) < tb.keys.size()) {
            bag_of[base + i] = static_cast<uint32_t>(bag_base + b);
          }
        }
      }
      base += tb.keys.size();
      bag_base += num_bags;
    }

    std::vector<BackendBuffer<uint64_t>> keys;
    std::vector<BackendBuffer<int64_t>> table_offsets;
    std::vector<ops::detail::TableBatch> parts;
    for (const Table& tb : tables) {
      keys.push_back(upload(kGpu, tb.keys));
      table_offsets.push_back(upload(kGpu, tb.offsets));
      parts.push_back({keys.back().data(), table_offsets.back().data(), tb.keys.size(),
                       tb.offsets.empty() ? 0 : tb.offsets.size() - 1});
    }
    BackendBuffer<int64_t> got_offsets(kGpu, bags + 1);
    BackendBuffer<uint64_t> got_status(kGpu, ops::detail::kTableKeyStatusWords);
    backend_zero(kGpu, got_status.data(), ops::detail::kTableKeyStatusWords * sizeof(uint64_t));
    ASSERT_TRUE(ops::detail::combine_tables_narrow(gpu, parts, shift, true, got_offsets.data(),
                                                   got_status.data(), narrow_ws, nullptr));
    backend_synchronize(kGpu);
    EXPECT_EQ(download(got_status, status.size()), status);
    if (bags > 0) EXPECT_EQ(download(got_offsets, bags + 1), offsets);
    const std::vector<uint32_t> narrow = from_device(narrow_ws.narrow_keys(n, nullptr), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(narrow[i], static_cast<uint32_t>(combined[i])) << i;
    }
    if (bad) continue;  // a refused batch: its bags and dedup are never used
    if (bags > 0) EXPECT_EQ(from_device(narrow_ws.bag_of(n, nullptr), n), bag_of);

    // The dedup of the narrow keys (bags on the side stream) against that of the combined keys;
    // the third (k = 2) of the narrow keys again without the grouped ids (the bags only).
    BackendBuffer<uint64_t> wide_keys = upload(kGpu, combined), count(kGpu, 3);
    BackendBuffer<uint64_t> unique[3] = {{kGpu, n + 1}, {kGpu, n + 1}, {kGpu, n + 1}};
    BackendBuffer<uint32_t> inverse[3] = {{kGpu, n + 1}, {kGpu, n + 1}, {kGpu, n + 1}};
    BackendBuffer<uint32_t> ids[2] = {{kGpu, n + 1}, {kGpu, n + 1}};
    BackendBuffer<uint32_t> begin[3] = {{kGpu, n + 2}, {kGpu, n + 2}, {kGpu, n + 2}};
    BackendBuffer<uint32_t> by_row[3] = {{kGpu, n + 1}, {kGpu, n + 1}, {kGpu, n + 1}};
    for (int k = 0; k < 3; ++k) {
      ops::detail::dedup_grouped_async(
          gpu, n, k == 1 ? wide_keys.data() : nullptr, unique[k].data(), inverse[k].data(),
          k < 2 ? ids[k].data() : nullptr, begin[k].data(), by_row[k].data(), got_offsets.data(),
          bags, end_bit, count.data() + k, k == 1 ? wide_ws : narrow_ws, nullptr);
    }
    backend_synchronize(kGpu);
    const std::vector<uint64_t> counts = download(count, 3);
    ASSERT_EQ(counts[0], counts[1]);
    ASSERT_EQ(counts[2], counts[1]);
    const size_t u = counts[0];
    for (int k : {0, 2}) {
      SCOPED_TRACE("dedup " + std::to_string(k));
      EXPECT_EQ(download(unique[k], u), download(unique[1], u));
      EXPECT_EQ(download(inverse[k], n), download(inverse[1], n));
      EXPECT_EQ(download(begin[k], u + 1), download(begin[1], u + 1));
      if (bags > 0) EXPECT_EQ(download(by_row[k], n), download(by_row[1], n));
    }
    EXPECT_EQ(download(ids[0], n), download(ids[1], n));
  }
}

}  // namespace
}  // namespace dynemb

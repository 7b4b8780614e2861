// Reserved keys in batches large enough for the pool: ERROR screens the batch in parallel and
// names the first reserved key in batch order; WARNING / IGNORE let the workers skip and count
// them, and WARNING names the first one and the count, as with a small batch on one thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/warning_capture.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb {
namespace {

constexpr uint32_t kDim = 4;

TableOptions pooled_options(SafeCheck mode) {
  TableOptions o;
  o.dim = kDim;
  o.init_capacity = 1u << 17;
  o.max_capacity = 1u << 17;
  o.num_threads = 3;
  o.safe_check = mode;
  o.initializer.kind = InitializerKind::kConstant;
  o.initializer.value = 0.25f;
  return o;
}

// A batch of distinct ordinary keys with `reserved` reserved keys at random positions (the
// first of them after the batch's first pool task); `positions` lists where, ascending.
struct Batch {
  std::vector<uint64_t> keys, clean;
  std::vector<size_t> positions;
};

Batch draw_batch(std::mt19937_64& rng, size_t n, size_t reserved) {
  Batch b;
  std::set<uint64_t> seen;
  while (b.clean.size() < n - reserved) {
    const uint64_t k = rng() >> 2;
    if (seen.insert(k).second) b.clean.push_back(k);
  }
  std::set<size_t> at;
  while (at.size() < reserved) at.insert(n / 4 + rng() % (n - n / 4));
  b.positions.assign(at.begin(), at.end());
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    if (at.count(i) != 0) {
      b.keys.push_back(kFirstReservedKey + rng() % 16);
    } else {
      b.keys.push_back(b.clean[next++]);
    }
  }
  return b;
}

TEST(CpuReservedKeysPooling, PooledErrorScreenNamesTheFirstReservedKeyAndChangesNothing) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuReservedKeysPooling seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto table = make_table<uint64_t>(Backend::kCpu, pooled_options(SafeCheck::kError));
  const Batch b = draw_batch(rng, 60000, 1 + rng() % 5);
  std::vector<float> rows(b.keys.size() * kDim, 1.0f);
  std::vector<uint8_t> founds(b.keys.size());
  auto* found = reinterpret_cast<bool*>(founds.data());
  const std::string first = "keys[" + std::to_string(b.positions.front()) +
                            "] = " + std::to_string(b.keys[b.positions.front()]);
  auto expect_refused = [&](const char* name, auto&& call) {
    SCOPED_TRACE(name);
    try {
      call();
      ADD_FAILURE() << "no InvalidArgument";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(name), std::string::npos) << message;
      EXPECT_NE(message.find(first), std::string::npos) << message;
    }
    EXPECT_EQ(table->size(), 0u);
    EXPECT_EQ(table->stats().reserved_keys, 0u);
  };
  const size_t n = b.keys.size();
  expect_refused("insert_or_assign",
                 [&] { table->insert_or_assign(n, b.keys.data(), rows.data()); });
  expect_refused("find_or_insert",
                 [&] { table->find_or_insert(n, b.keys.data(), rows.data(), found); });
  expect_refused("contains", [&] { table->contains(n, b.keys.data(), found); });
  expect_refused("erase", [&] { table->erase(n, b.keys.data()); });
}

TEST(CpuReservedKeysPooling, PooledWarningSkipsCountsAndNamesTheFirstReservedKey) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuReservedKeysPooling seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (SafeCheck mode : {SafeCheck::kWarning, SafeCheck::kIgnore}) {
    SCOPED_TRACE(to_string(mode));
    auto table = make_table<uint64_t>(Backend::kCpu, pooled_options(mode));
    const Batch b = draw_batch(rng, 60000, 2 + rng() % 40);
    const size_t n = b.keys.size();
    const size_t count = b.positions.size();
    std::vector<float> rows(n * kDim);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 977);
    std::vector<float> out(n * kDim, -1.0f);
    std::vector<uint8_t> founds(n, 1);
    auto* found = reinterpret_cast<bool*>(founds.data());
    testing::WarningCapture warnings;
    table->find_or_insert(n, b.keys.data(), out.data(), found);
    EXPECT_EQ(table->size(), n - count);
    EXPECT_EQ(table->stats().reserved_keys, count);
    for (size_t i = 0; i < n; ++i) {
      const bool reserved = is_reserved_key(b.keys[i]);
      ASSERT_FALSE(found[i]) << i;
      ASSERT_EQ(out[i * kDim], reserved ? -1.0f : 0.25f) << i;  // reserved: row untouched
    }
    table->contains(n, b.keys.data(), found);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(found[i], !is_reserved_key(b.keys[i])) << i;
    table->erase(n, b.keys.data());
    EXPECT_EQ(table->size(), 0u);
    EXPECT_EQ(table->stats().reserved_keys, 3 * count);
    EXPECT_EQ(table->stats().erased, n - count);
    if (mode == SafeCheck::kIgnore) {
      EXPECT_TRUE(warnings.messages().empty());
      continue;
    }
    ASSERT_EQ(warnings.messages().size(), 3u);
    const std::string first = "keys[" + std::to_string(b.positions.front()) +
                              "] = " + std::to_string(b.keys[b.positions.front()]);
    const std::string more = "and " + std::to_string(count - 1) + " more";
    for (const std::string& m : warnings.messages()) {
      EXPECT_NE(m.find(first), std::string::npos) << m;
      EXPECT_NE(m.find(more), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace dynemb

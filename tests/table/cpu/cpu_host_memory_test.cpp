// The CPU tables' host-memory account: a table, or a growth, that would take the process's tables
// past the memory it may use is refused with OutOfMemory naming the option, and leaves every
// table as it was.
#include "table/cpu/host_memory.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/table/table.hpp"
#include "table/cpu/bucket_storage.hpp"

namespace dynemb::testing {
namespace {

using table::cpu::BucketStorage;
using table::cpu::host_memory_limit;
using table::cpu::mapped_table_bytes;
using table::cpu::set_host_memory_limit_for_testing;

// Sets the account's limit for one test and restores the machine's after it.
class LimitGuard {
 public:
  explicit LimitGuard(size_t bytes) { set_host_memory_limit_for_testing(bytes); }
  ~LimitGuard() { set_host_memory_limit_for_testing(0); }
};

TableOptions small_options(uint64_t init_capacity, uint64_t max_capacity) {
  TableOptions o;
  o.dim = 8;
  o.bucket_capacity = 128;
  o.init_capacity = init_capacity;
  o.max_capacity = max_capacity;
  o.num_threads = 1;
  return o;
}

uint64_t storage_bytes(const TableOptions& o, uint64_t capacity) {
  return BucketStorage::bytes_for(capacity / o.bucket_capacity, o.bucket_capacity, o.dim);
}

TEST(CpuHostMemory, TableLargerThanTheMachineIsRefusedByName) {
  TableOptions o;
  o.dim = 64;
  o.bucket_capacity = 128;
  const uint64_t slot = storage_bytes(o, 128) / 128;
  o.init_capacity = o.max_capacity = std::bit_ceil(host_memory_limit() / slot + 1);
  ASSERT_LE(o.init_capacity, uint64_t{1} << 40);
  const size_t before = mapped_table_bytes();
  try {
    make_table<uint64_t>(Backend::kCpu, o);
    FAIL() << "a table of " << o.init_capacity << " slots was created";
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("init_capacity = " + std::to_string(o.init_capacity)), std::string::npos)
        << what;
    EXPECT_NE(what.find("GiB"), std::string::npos) << what;
  }
  EXPECT_EQ(mapped_table_bytes(), before);
}

TEST(CpuHostMemory, TablesAreCountedTogetherAndReleased) {
  const TableOptions o = small_options(1024, 1024);
  const uint64_t one = storage_bytes(o, 1024);
  const LimitGuard limit(mapped_table_bytes() + one + one / 2);
  auto first = make_table<uint64_t>(Backend::kCpu, o);
  EXPECT_THROW(make_table<uint64_t>(Backend::kCpu, o), OutOfMemory);
  first.reset();  // its memory goes back to the account
  auto second = make_table<uint64_t>(Backend::kCpu, o);
  EXPECT_EQ(second->capacity(), 1024u);
}

TEST(CpuHostMemory, GrowthPastTheLimitThrowsAndKeepsWhatWasStored) {
  TestRng rng;
  const TableOptions o = small_options(1024, 1u << 16);
  // Room for the first doubling (both storages live during the rehash), not the second.
  const size_t base = mapped_table_bytes();
  const LimitGuard limit(base + storage_bytes(o, 2048) + storage_bytes(o, 4096) - 1);
  auto table = make_table<uint64_t>(Backend::kCpu, o);
  std::map<uint64_t, std::vector<float>> stored;  // what every successful call stored
  bool refused = false;
  for (int call = 0; call < 64 && !refused; ++call) {
    std::vector<uint64_t> keys(100);
    std::vector<float> values(keys.size() * o.dim);
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i] = rng.next() >> 1;
      for (uint32_t j = 0; j < o.dim; ++j)
        values[i * o.dim + j] = static_cast<float>(rng.next() % 1000);
    }
    try {
      table->insert_or_assign(keys.size(), keys.data(), values.data());
    } catch (const OutOfMemory& e) {
      refused = true;
      EXPECT_NE(std::string(e.what()).find("growth"), std::string::npos) << e.what();
      continue;
    }
    for (size_t i = 0; i < keys.size(); ++i)
      stored[keys[i]] =
          std::vector<float>(values.begin() + i * o.dim, values.begin() + (i + 1) * o.dim);
  }
  ASSERT_TRUE(refused) << "the table grew past the limit";
  EXPECT_EQ(table->capacity(), 2048u);  // one doubling fit, the second did not
  // Every row stored before the refused call is still there, unchanged.
  std::map<uint64_t, std::vector<float>> now;
  table->for_each([&](uint64_t key, std::span<const float> row, uint64_t) {
    now.emplace(key, std::vector<float>(row.begin(), row.end()));
  });
  EXPECT_EQ(table->size(), now.size());
  for (const auto& [key, row] : stored) {
    const auto it = now.find(key);
    ASSERT_NE(it, now.end()) << "key " << key << " lost";
    EXPECT_EQ(it->second, row) << "key " << key;
  }
}

}  // namespace
}  // namespace dynemb::testing

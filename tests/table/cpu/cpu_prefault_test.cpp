// Faulting in a storage's memory ahead of use: ranges that partition the buckets, run on several
// threads at once, leave every page of the three arrays resident and the storage still empty.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "dynemb/table/table.hpp"
#include "table/cpu/bucket_storage.hpp"

namespace dynemb::table::cpu {
namespace {

// How many of the pages of [p, p + bytes) are resident (p page-aligned).
size_t resident_pages(const void* p, size_t bytes, size_t* pages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  *pages = (bytes + page - 1) / page;
  std::vector<unsigned char> in_core(*pages);
  EXPECT_EQ(mincore(const_cast<void*>(p), bytes, in_core.data()), 0);
  return static_cast<size_t>(
      std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return (c & 1) != 0; }));
}

TEST(CpuPrefault, PartitionedFaultInMakesEveryPageResidentAndKeepsTheStorageEmpty) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuPrefault seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const uint64_t buckets = 200 + rng() % 400;
  const uint32_t cap = 16u << (rng() % 3);
  const uint32_t dim = 1 + static_cast<uint32_t>(rng() % 40);
  const BucketStorage s(buckets, cap, dim);
  const uint64_t slots = buckets * cap;
  struct Array {
    const void* base;
    size_t bytes;
  };
  const Array arrays[] = {{s.ctrl(0), slots},
                          {&s.key(0, 0), slots * 2 * sizeof(uint64_t)},
                          {s.row(0, 0), slots * dim * sizeof(float)}};
  // Random cut points: ranges of one bucket up to many, their edges inside pages.
  std::vector<uint64_t> cuts{0, buckets};
  for (int i = 0; i < 7; ++i) cuts.push_back(rng() % buckets);
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::thread> threads;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    threads.emplace_back([&, i] { s.fault_in(cuts[i], cuts[i + 1]); });
  }
  for (std::thread& t : threads) t.join();
  for (const Array& a : arrays) {
    size_t pages = 0;
    EXPECT_EQ(resident_pages(a.base, a.bytes, &pages), pages) << a.bytes << " bytes";
  }
  for (uint64_t b = 0; b < buckets; ++b) {
    for (uint32_t slot = 0; slot < cap; ++slot) {
      ASSERT_FALSE(s.is_full_slot(b, slot));
      ASSERT_EQ(s.key(b, slot), 0u);
      ASSERT_EQ(s.row(b, slot)[dim - 1], 0.0f);
    }
  }
}

// The option only moves when pages are taken: tables with and without it hold the same rows.
TEST(CpuPrefault, TablesWithAndWithoutPrefaultHoldTheSameRows) {
  const uint64_t seed = std::random_device{}();
  std::printf("CpuPrefault seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TableOptions o;
  o.dim = 8;
  o.init_capacity = 1u << 14;
  o.max_capacity = 1u << 17;
  o.num_threads = 2;
  o.initializer.kind = InitializerKind::kDebug;
  std::vector<uint64_t> keys(40000);
  for (uint64_t& k : keys) k = rng() >> 8;
  std::vector<std::vector<float>> rows;
  std::vector<uint8_t> founds(keys.size());
  for (bool prefault : {false, true}) {
    o.prefault_host_memory = prefault;
    auto table = make_table<uint64_t>(Backend::kCpu, o);
    std::vector<float> out(keys.size() * o.dim);
    table->find_or_insert(keys.size(), keys.data(), out.data(),
                          reinterpret_cast<bool*>(founds.data()));  // grows three times
    EXPECT_EQ(table->capacity(), o.max_capacity);
    table->find(keys.size(), keys.data(), out.data(), reinterpret_cast<bool*>(founds.data()),
                nullptr);
    EXPECT_EQ(std::count(founds.begin(), founds.end(), 1), static_cast<long>(keys.size()));
    rows.push_back(out);
  }
  EXPECT_EQ(rows[0], rows[1]);
}

}  // namespace
}  // namespace dynemb::table::cpu

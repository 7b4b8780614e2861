// find_or_insert_pointers_counted: find_or_insert_pointers of the first *count keys, the count
// in backend memory (a training step's, read on the device by the CUDA table at a fixed capacity,
// read back by the default). Every backend and key type, fixed and growable tables.
#include <gtest/gtest.h>

#include <set>

#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableCountedPointersTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableCountedPointersTest, AllTableConfigs, TableConfigNames);

TYPED_TEST(TableCountedPointersTest, OnlyTheCountedKeysAreLookedUpOrInserted) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (const bool growable : {false, true}) {
    SCOPED_TRACE(growable ? "growable" : "fixed capacity");
    TableOptions o = roomy_options(ScorePolicy::kStep, 6);
    if (growable) o.init_capacity = 1024;
    o.initializer = InitializerOptions{InitializerKind::kUniform};
    o.initializer.seed = rng.next();
    auto h = this->make(o);
    const auto keys = random_keys<K>(rng, 500);
    const size_t count = 120 + rng.next() % 300;
    // A third of the counted keys are stored already.
    std::vector<K> stored;
    for (size_t i = 0; i < count; i += 3) stored.push_back(keys[i]);
    h.insert_or_assign(stored, value_rows(stored, h.dim()));

    auto k = h.upload(keys);
    float* const untouched = reinterpret_cast<float*>(uintptr_t{1});
    auto p = h.filled(keys.size(), untouched);
    auto f = h.flags(keys.size(), true);
    auto c = h.upload(std::vector<uint64_t>{count});
    h->find_or_insert_pointers_counted(keys.size(), c.data(), k.data(), p.data(), f.data());
    const std::vector<float*> rows = h.download(p, keys.size());
    const std::vector<bool> founds = h.download_flags(f, keys.size());

    const Snapshot<K> contents = h.snapshot();
    EXPECT_EQ(contents.size(), count);  // the counted keys, and no other
    std::set<const float*> seen;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i >= count) {
        EXPECT_EQ(rows[i], untouched) << i;  // left as they were
        EXPECT_TRUE(founds[i]) << i;
        EXPECT_EQ(contents.count(keys[i]), 0u) << i;
        continue;
      }
      const bool was_stored = i % 3 == 0;
      EXPECT_EQ(founds[i], was_stored) << i;
      ASSERT_NE(rows[i], nullptr) << i;
      EXPECT_TRUE(seen.insert(rows[i]).second) << i;
      Row row(h.dim());
      copy_from_backend(h.backend(), row.data(), rows[i], h.dim() * sizeof(float));
      const Row expected =
          was_stored ? value_row(keys[i], h.dim()) : initial_row(o.initializer, keys[i], h.dim());
      EXPECT_EQ(row, expected) << i;
    }
    // A count above n covers n keys.
    auto big = h.upload(std::vector<uint64_t>{keys.size() * 2});
    h->find_or_insert_pointers_counted(keys.size(), big.data(), k.data(), p.data(), f.data());
    EXPECT_EQ(h->size(), keys.size());
  }
}

}  // namespace
}  // namespace dynemb::testing

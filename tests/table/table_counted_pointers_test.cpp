// find_or_insert_pointers_counted: find_or_insert_pointers of the first *count keys, the count
// in backend memory (a training step's, read on the device by the CUDA table at a fixed capacity,
// read back by the default). Every backend and key type, fixed and growable tables.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TableCountedPointersTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TableCountedPointersTest, AllTableConfigs, TableConfigNames);

// The address a call's rows hold before it: what an entry it must not write keeps.
float* untouched_row() {
  return reinterpret_cast<float*>(uintptr_t{1});
}

// What find_or_insert_pointers_counted of `keys` with `count` (in backend memory) gave: every
// entry's address and founds flag, set to untouched_row() and true before the call.
struct CountedCall {
  std::vector<float*> rows;
  std::vector<bool> founds;
};

template <TableKey K>
CountedCall counted_call(TableHarness<K>& h, const std::vector<K>& keys, uint64_t count) {
  auto k = h.upload(keys);
  auto p = h.filled(keys.size(), untouched_row());
  auto f = h.flags(keys.size(), true);
  auto c = h.upload(std::vector<uint64_t>{count});
  h->find_or_insert_pointers_counted(keys.size(), c.data(), k.data(), p.data(), f.data());
  return CountedCall{h.download(p, keys.size()), h.download_flags(f, keys.size())};
}

// Puts `keys` in a uniformly random order.
template <TableKey K>
void shuffle(TestRng& rng, std::vector<K>& keys) {
  for (size_t i = keys.size(); i > 1; --i) std::swap(keys[i - 1], keys[rng.uniform(0, i - 1)]);
}

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

    const auto [rows, founds] = counted_call(h, keys, count);

    const Snapshot<K> contents = h.snapshot();
    EXPECT_EQ(contents.size(), count);  // the counted keys, and no other
    std::set<const float*> seen;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i >= count) {
        EXPECT_EQ(rows[i], untouched_row()) << i;  // left as they were
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
    counted_call(h, keys, keys.size() * 2);
    EXPECT_EQ(h->size(), keys.size());
  }
}

// The counted keys hold copies (stored and new keys, 1-3 copies each) and the entries past the
// count are padding: new keys, copies of counted keys and reserved keys. With the copies'
// owner search on (every call on CUDA, on an HBM-only and a hybrid table), a search over all n
// entries would list padding keys among the owners (the op then stores some of them), give the
// padding copies their owner's address and founds, and count the reserved keys as skipped. So:
// the table holds exactly the stored and counted keys, every copy of a counted key has its
// key's address and exactly one copy of a new key reports it not found, the entries past the
// count are left as they were, and nothing is counted as reserved or refused.
TYPED_TEST(TableCountedPointersTest, PaddingPastTheCountIsNeverReadByTheCopiesSearch) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (const bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "hybrid (CUDA)" : "rows in one memory");
    TableOptions o = roomy_options(ScorePolicy::kStep, 6);
    o.safe_check = SafeCheck::kIgnore;  // the CUDA table reads the count on the device
    o.coalesce_copies_min_batch = 1;    // the owner search on every call (CUDA)
    if (hybrid) o.max_hbm_for_values = o.max_capacity / 2 * o.dim * sizeof(float);
    o.initializer = InitializerOptions{InitializerKind::kUniform};
    o.initializer.seed = rng.next();
    auto h = this->make(o);
    const auto distinct = random_keys<K>(rng, 700);
    const std::vector<K> stored(distinct.begin(), distinct.begin() + 150);
    const std::vector<K> fresh(distinct.begin() + 150, distinct.begin() + 400);
    const std::vector<K> padding_fresh(distinct.begin() + 400, distinct.end());
    h.insert_or_assign(stored, value_rows(stored, h.dim()));

    std::vector<K> keys;
    for (const auto* group : {&stored, &fresh}) {
      for (const K key : *group) keys.insert(keys.end(), rng.uniform(1, 3), key);
    }
    shuffle(rng, keys);
    const size_t count = keys.size();
    std::vector<K> padding(padding_fresh);
    for (size_t j = 0; j < 200; ++j) padding.push_back(keys[rng.uniform(0, count - 1)]);
    const std::vector<K> reserved = reserved_keys<K>();
    padding.insert(padding.end(), reserved.begin(), reserved.end());
    shuffle(rng, padding);
    keys.insert(keys.end(), padding.begin(), padding.end());

    const auto [rows, founds] = counted_call(h, keys, count);

    const std::set<K> was_stored(stored.begin(), stored.end());
    const Snapshot<K> contents = h.snapshot();
    EXPECT_EQ(contents.size(), stored.size() + fresh.size());
    for (const auto* group : {&stored, &fresh}) {
      for (const K key : *group) EXPECT_EQ(contents.count(key), 1u) << "key " << key;
    }
    std::map<K, float*> address_of;
    std::set<float*> addresses;
    std::map<K, int> not_found;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i >= count) {
        EXPECT_EQ(rows[i], untouched_row()) << "padding position " << i << ", key " << keys[i];
        EXPECT_TRUE(founds[i]) << "padding position " << i << ", key " << keys[i];
        continue;
      }
      ASSERT_NE(rows[i], nullptr) << i;
      const auto [at, first] = address_of.emplace(keys[i], rows[i]);
      EXPECT_EQ(at->second, rows[i]) << "copies of key " << keys[i] << " at different addresses";
      if (first) EXPECT_TRUE(addresses.insert(rows[i]).second) << "two keys share an address";
      if (!founds[i]) ++not_found[keys[i]];
    }
    for (const auto& [key, address] : address_of) {
      const bool old = was_stored.count(key) != 0;
      EXPECT_EQ(not_found[key], old ? 0 : 1) << "key " << key;
      Row row(h.dim());
      copy_from_backend(h.backend(), row.data(), address, h.dim() * sizeof(float));
      EXPECT_EQ(row, old ? value_row(key, h.dim()) : initial_row(o.initializer, key, h.dim()))
          << "key " << key;
    }
    EXPECT_EQ(address_of.size(), stored.size() + fresh.size());
    const TableStats stats = h->stats();
    EXPECT_EQ(stats.reserved_keys, 0u) << "padding keys were read";
    EXPECT_EQ(stats.refused, 0u);
  }
}

}  // namespace
}  // namespace dynemb::testing

// find_pointers and find_or_insert_pointers (docs/table_contract.md): row addresses in the
// table's memory instead of copies, on every backend and key type.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "dynemb/core/error.hpp"
#include "table/table_harness.hpp"

namespace dynemb::testing {
namespace {

template <class Config>
class TablePointersTest : public TableTestBase<Config> {};
TYPED_TEST_SUITE(TablePointersTest, AllTableConfigs, TableConfigNames);

// What a pointer call returned, downloaded: the addresses and founds.
struct PointerResult {
  std::vector<float*> rows;
  std::vector<bool> founds;
};

template <TableKey K>
PointerResult find_pointers(TableHarness<K>& h, const std::vector<K>& keys) {
  const size_t n = keys.size();
  auto k = h.upload(keys);
  auto p = h.filled(n, reinterpret_cast<float*>(uintptr_t{1}));
  auto f = h.flags(n, true);
  h->find_pointers(n, k.data(), p.data(), f.data());
  return PointerResult{h.download(p, n), h.download_flags(f, n)};
}

template <TableKey K>
PointerResult find_or_insert_pointers(TableHarness<K>& h, const std::vector<K>& keys,
                                      const std::vector<uint64_t>& scores = {}) {
  const size_t n = keys.size();
  auto k = h.upload(keys);
  auto p = h.filled(n, reinterpret_cast<float*>(uintptr_t{1}));
  auto f = h.flags(n, true);
  auto s = h.upload(scores);
  h->find_or_insert_pointers(n, k.data(), p.data(), f.data(), s.data());
  return PointerResult{h.download(p, n), h.download_flags(f, n)};
}

template <TableKey K>
PointerResult find_or_reserve_pointers(TableHarness<K>& h, const std::vector<K>& keys) {
  const size_t n = keys.size();
  auto k = h.upload(keys);
  auto p = h.filled(n, reinterpret_cast<float*>(uintptr_t{1}));
  auto f = h.flags(n, true);
  h->find_or_reserve_pointers(n, k.data(), p.data(), f.data());
  return PointerResult{h.download(p, n), h.download_flags(f, n)};
}

// The row at a table address, read into host memory.
Row read_row(Backend backend, const float* address, uint32_t dim) {
  Row row(dim);
  copy_from_backend(backend, row.data(), address, dim * sizeof(float));
  return row;
}

// Every non-null address of `r` is distinct and holds its key's stored row; every null one
// belongs to a key the table does not hold.
template <TableKey K>
void expect_addresses_match_contents(TableHarness<K>& h, const std::vector<K>& keys,
                                     const PointerResult& r) {
  const Snapshot<K> contents = h.snapshot();
  std::set<const float*> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto it = contents.find(keys[i]);
    if (r.rows[i] == nullptr) {
      EXPECT_EQ(it, contents.end()) << "key " << keys[i] << " is stored but got no address";
      continue;
    }
    ASSERT_NE(it, contents.end()) << "key " << keys[i] << " got an address but is not stored";
    EXPECT_TRUE(seen.insert(r.rows[i]).second) << "address of key " << keys[i] << " repeated";
    EXPECT_EQ(read_row(h.backend(), r.rows[i], h.dim()), it->second.row) << "key " << keys[i];
  }
}

TYPED_TEST(TablePointersTest, FindPointersAddressStoredRowsAndNullForMisses) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 300);
  const std::vector<K> stored(keys.begin(), keys.begin() + 200);
  h.insert_or_assign(stored, value_rows(stored, h.dim()));
  const PointerResult r = find_pointers(h, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(r.founds[i], i < stored.size()) << i;
    EXPECT_EQ(r.rows[i] != nullptr, i < stored.size()) << i;
  }
  expect_addresses_match_contents(h, keys, r);
}

TYPED_TEST(TablePointersTest, FindOrInsertPointersInsertsInitialRowsAndRowsUpdateInPlace) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options(ScorePolicy::kCustomized, 6);
  o.initializer = InitializerOptions{InitializerKind::kUniform};
  o.initializer.seed = rng.next();
  auto h = this->make(o);
  const auto keys = random_keys<K>(rng, 400);
  std::vector<K> stored;
  for (size_t i = 0; i < keys.size(); i += 2) stored.push_back(keys[i]);
  h.insert_or_assign(stored, value_rows(stored, h.dim()));

  const PointerResult r = find_or_insert_pointers(h, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool was_stored = i % 2 == 0;
    EXPECT_EQ(r.founds[i], was_stored) << i;
    ASSERT_NE(r.rows[i], nullptr) << i;
    const Row expected =
        was_stored ? value_row(keys[i], h.dim()) : initial_row(o.initializer, keys[i], h.dim());
    EXPECT_EQ(read_row(h.backend(), r.rows[i], h.dim()), expected) << i;
  }
  expect_addresses_match_contents(h, keys, r);

  // Rows written through the addresses are what the table then holds.
  const std::vector<float> updated = value_rows(keys, h.dim(), 7.5f);
  for (size_t i = 0; i < keys.size(); ++i) {
    copy_to_backend(h.backend(), r.rows[i], updated.data() + i * h.dim(), h.dim() * sizeof(float));
  }
  const FindResult after = h.find(keys);
  EXPECT_EQ(after.values, updated);
}

// 16-bit initializers (two elements a word): a new key's row, reached by address from
// find_or_insert_pointers or copied out by find_or_insert, is word for word the host's
// fill_initial_row; stored keys keep their rows. Dims 6 (rows written word by word) and 12
// (float4 words); on CUDA these run kernels of their own (init_row's kPacked).
TYPED_TEST(TablePointersTest, NewRowsOfSixteenBitInitializersAreTheHostsWordForWord) {
  using K = typename TestFixture::Key;
  TestRng rng;
  const auto bits_of = [](const Row& row) {
    std::vector<uint32_t> out(row.size());
    std::memcpy(out.data(), row.data(), row.size() * sizeof(float));
    return out;
  };
  for (const ValueType type : {ValueType::kFloat16, ValueType::kBFloat16}) {
    for (const uint32_t dim : {6u, 12u}) {
      for (const InitializerKind kind : {InitializerKind::kUniform, InitializerKind::kNormal}) {
        TableOptions o = roomy_options(ScorePolicy::kCustomized, dim);
        o.initializer = InitializerOptions{kind};
        o.initializer.seed = rng.next();
        o.initializer.value_type = type;
        auto h = this->make(o);
        const auto keys = random_keys<K>(rng, 300);
        std::vector<K> stored;
        for (size_t i = 0; i < keys.size(); i += 3) stored.push_back(keys[i]);
        h.insert_or_assign(stored, value_rows(stored, dim));
        const std::string what =
            to_string(type) + " dim " + std::to_string(dim) + " " + to_string(kind);

        const std::vector<K> first(keys.begin(), keys.begin() + 150);
        const PointerResult r = find_or_insert_pointers(h, first);
        for (size_t i = 0; i < first.size(); ++i) {
          ASSERT_NE(r.rows[i], nullptr) << what << " key " << i;
          EXPECT_EQ(r.founds[i], i % 3 == 0) << what << " key " << i;
          const Row expected =
              i % 3 == 0 ? value_row(first[i], dim) : initial_row(o.initializer, first[i], dim);
          EXPECT_EQ(bits_of(read_row(h.backend(), r.rows[i], dim)), bits_of(expected))
              << what << " key " << i;
        }
        const std::vector<K> second(keys.begin() + 150, keys.end());
        const FindResult copied = h.find_or_insert(second);
        for (size_t i = 0; i < second.size(); ++i) {
          const bool was_stored = (150 + i) % 3 == 0;
          const Row expected =
              was_stored ? value_row(second[i], dim) : initial_row(o.initializer, second[i], dim);
          EXPECT_EQ(bits_of(row_at(copied.values, i, dim)), bits_of(expected))
              << what << " key " << 150 + i;
        }
        EXPECT_EQ(h->size(), keys.size()) << what;
      }
    }
  }
}

TYPED_TEST(TablePointersTest, FindOrReservePointersReservesSlotsTheCallerFills) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options(ScorePolicy::kCustomized, 12));
  const auto keys = random_keys<K>(rng, 500);
  std::vector<K> stored;
  for (size_t i = 0; i < keys.size(); i += 3) stored.push_back(keys[i]);
  h.insert_or_assign(stored, value_rows(stored, h.dim()));

  const PointerResult r = find_or_reserve_pointers(h, keys);
  std::set<const float*> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool was_stored = i % 3 == 0;
    EXPECT_EQ(r.founds[i], was_stored) << i;
    ASSERT_NE(r.rows[i], nullptr) << i;
    EXPECT_TRUE(seen.insert(r.rows[i]).second) << "address of key " << keys[i] << " repeated";
    // A stored key's row is untouched; a new key's row is whatever the slot held.
    if (was_stored)
      EXPECT_EQ(read_row(h.backend(), r.rows[i], h.dim()), value_row(keys[i], h.dim()));
  }
  EXPECT_EQ(h->size(), keys.size());
  // The caller writes the new keys' rows; the table then holds them.
  const std::vector<float> fresh = value_rows(keys, h.dim(), 3.25f);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!r.founds[i]) {
      copy_to_backend(h.backend(), r.rows[i], fresh.data() + i * h.dim(), h.dim() * sizeof(float));
    }
  }
  const FindResult after = h.find(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    const Row expected =
        r.founds[i] ? value_row(keys[i], h.dim()) : value_row(keys[i], h.dim(), 3.25f);
    EXPECT_EQ(row_at(after.values, i, h.dim()), expected) << i;
  }
}

// Copies of stored and new keys in one batch over full buckets, so finds, inserts and
// evictions of one call meet in the same buckets (on CUDA: the lock-free look-up of stored keys
// runs beside the locked inserts): every copy of a key gets the same address or none, an
// address always holds its key's row (the stored one, or the initializer's for a new key), a
// key appearing once in the batch and not stored before is never reported found, and the
// table stays full.
TYPED_TEST(TablePointersTest, CopiesAndEvictionsInOneCallKeepAddressesTrue) {
  using K = typename TestFixture::Key;
  TestRng rng;
  for (const ScorePolicy policy :
       {ScorePolicy::kStep, ScorePolicy::kTimestamp, ScorePolicy::kLfu}) {
    TableOptions o = tiny_options(policy, SafeCheck::kIgnore, 8);
    o.initializer = InitializerOptions{InitializerKind::kUniform};
    o.initializer.seed = rng.next();
    auto h = this->make(o);
    std::vector<K> stored;  // every bucket full
    for (uint64_t b = 0; b < h.num_buckets(); ++b) {
      const auto in_bucket = keys_in_bucket<K>(rng, b, h.num_buckets(), 16);
      stored.insert(stored.end(), in_bucket.begin(), in_bucket.end());
    }
    h.insert_or_assign(stored, value_rows(stored, h.dim()));
    ASSERT_EQ(h->size(), 64u) << to_string(policy);
    const auto fresh = random_keys<K>(rng, 48, std::set<K>(stored.begin(), stored.end()));
    std::vector<K> batch;
    std::map<K, int> copies;
    for (size_t c = 0; c < 200; ++c) {
      const bool old_key = rng.uniform(0, 1) == 0;
      const K key = old_key ? stored[rng.uniform(0, stored.size() - 1)]
                            : fresh[rng.uniform(0, fresh.size() - 1)];
      batch.push_back(key);
      ++copies[key];
    }
    const std::set<K> before(stored.begin(), stored.end());
    const PointerResult r = find_or_insert_pointers(h, batch);
    const Snapshot<K> contents = h.snapshot();
    EXPECT_EQ(contents.size(), 64u) << to_string(policy);
    // Whether some copy of the key inserted it (found false): then its row is the
    // initializer's, else the row stored before the call.
    std::map<K, bool> inserted;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (r.rows[i] != nullptr && !r.founds[i]) inserted[batch[i]] = true;
    }
    std::map<K, const float*> address_of;
    std::map<const float*, K> key_at;
    for (size_t i = 0; i < batch.size(); ++i) {
      const K key = batch[i];
      const auto it = contents.find(key);
      if (r.rows[i] == nullptr) {
        EXPECT_EQ(it, contents.end()) << "key " << key << " is stored but got no address";
        continue;
      }
      ASSERT_NE(it, contents.end()) << "key " << key << " got an address but is not stored";
      const auto a = address_of.emplace(key, r.rows[i]).first;
      EXPECT_EQ(a->second, r.rows[i]) << "copies of key " << key << " got different addresses";
      const auto k = key_at.emplace(r.rows[i], key).first;
      EXPECT_EQ(k->second, key) << "two keys share an address";
      if (inserted[key]) {
        EXPECT_EQ(read_row(h.backend(), r.rows[i], h.dim()),
                  initial_row(o.initializer, key, h.dim()))
            << "key " << key;
      } else {
        EXPECT_EQ(before.count(key), 1u) << "key " << key << " found but never stored";
        EXPECT_EQ(read_row(h.backend(), r.rows[i], h.dim()), value_row(key, h.dim()))
            << "key " << key;
      }
      if (before.count(key) == 0 && copies[key] == 1) EXPECT_FALSE(r.founds[i]) << key;
    }
  }
}

TYPED_TEST(TablePointersTest, AddressesSurviveAGrowthInsideTheCall) {
  using K = typename TestFixture::Key;
  TestRng rng;
  TableOptions o = roomy_options();
  o.init_capacity = 128;
  o.bucket_capacity = 16;
  o.max_capacity = 8192;
  auto h = this->make(o);
  const auto first = random_keys<K>(rng, 60);
  h.insert_or_assign(first, value_rows(first, h.dim()));
  auto keys = random_keys<K>(rng, 1500, std::set<K>(first.begin(), first.end()));
  keys.insert(keys.end(), first.begin(), first.end());
  const PointerResult r = find_or_insert_pointers(h, keys);
  EXPECT_GT(h->capacity(), 128u);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_NE(r.rows[i], nullptr) << i;
  expect_addresses_match_contents(h, keys, r);
}

TYPED_TEST(TablePointersTest, KeyEvictedLaterInTheSameCallGetsNoAddress) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(tiny_options());
  // One full bucket: one entry at score 100, the rest at 1000.
  const uint64_t bucket = rng.uniform(0, h.num_buckets() - 1);
  const auto stored = keys_in_bucket<K>(rng, bucket, h.num_buckets(), 16);
  std::vector<uint64_t> scores(16, 1000);
  scores[rng.uniform(0, 15)] = 100;
  h.insert_or_assign(stored, value_rows(stored, h.dim()), scores);
  // Two newcomers: whichever goes first takes the score-100 slot and becomes the lowest, so
  // the other either evicts it (500 < 600) or is refused; only one of them can stay.
  const auto fresh =
      keys_in_bucket<K>(rng, bucket, h.num_buckets(), 2, std::set<K>(stored.begin(), stored.end()));
  const PointerResult r = find_or_insert_pointers(h, fresh, {500, 600});
  expect_addresses_match_contents(h, fresh, r);
  const Snapshot<K> contents = h.snapshot();
  EXPECT_EQ(contents.count(fresh[0]) + contents.count(fresh[1]), 1u);
  EXPECT_EQ(contents.size(), 16u);
}

TYPED_TEST(TablePointersTest, ReservedKeysGetNoAddressOrThrowUnderError) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto keys = random_keys<K>(rng, 20);
  keys.push_back(static_cast<K>(kEmptyKey));
  {
    TableOptions o = roomy_options();
    o.safe_check = SafeCheck::kIgnore;
    auto h = this->make(o);
    const PointerResult r = find_or_insert_pointers(h, keys);
    EXPECT_EQ(r.rows.back(), nullptr);
    EXPECT_FALSE(r.founds.back());
    expect_addresses_match_contents(h, std::vector<K>(keys.begin(), keys.end() - 1), r);
    EXPECT_EQ(h->stats().reserved_keys, 1u);
  }
  auto h = this->make(roomy_options());  // safe_check = ERROR
  EXPECT_THROW(find_or_insert_pointers(h, keys), InvalidArgument);
  EXPECT_EQ(h->size(), 0u);
}

TYPED_TEST(TablePointersTest, NullRowsArgumentIsRejected) {
  using K = typename TestFixture::Key;
  TestRng rng;
  auto h = this->make(roomy_options());
  const auto keys = random_keys<K>(rng, 4);
  auto k = h.upload(keys);
  EXPECT_THROW(h->find_pointers(keys.size(), k.data(), nullptr, nullptr), InvalidArgument);
  EXPECT_THROW(h->find_or_insert_pointers(keys.size(), k.data(), nullptr, nullptr),
               InvalidArgument);
  EXPECT_THROW(h->find_or_reserve_pointers(keys.size(), k.data(), nullptr, nullptr),
               InvalidArgument);
  EXPECT_EQ(h->size(), 0u);
}

}  // namespace
}  // namespace dynemb::testing

// The caching table's device path (find_or_insert, its address and given-row forms, prefetch),
// with every buffer in the backend's memory, against one CPU table holding every row: results,
// rows and scores; then nothing lost (each key in one tier). On the CPU here; on the GPU the same
// calls run on the CUDA fast tier (the instance skips without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "dynemb/storage/host_storage.hpp"

namespace dynemb::testing {
namespace {

using K = int64_t;
using storage::CachedTable;

// A fast tier of `capacity` slots that never grows (buckets of `bucket_capacity`, full load
// allowed), `policy` scores and uniform initial rows drawn from `seed`.
TableOptions fast_tier_options(uint32_t dim, uint64_t capacity, uint32_t bucket_capacity,
                               ScorePolicy policy, uint64_t seed) {
  TableOptions o;
  o.dim = dim;
  o.init_capacity = o.max_capacity = capacity;
  o.bucket_capacity = bucket_capacity;
  o.max_load_factor = 1.0;
  o.score_policy = policy;
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = seed;
  return o;
}

// `n` keys of [0, space), distinct when asked (given scores: one score per key).
std::vector<K> draw_keys(TestRng& rng, size_t n, uint64_t space, bool distinct) {
  std::vector<K> keys(n);
  for (auto& k : keys) k = static_cast<K>(rng.uniform(0, space - 1));
  if (distinct) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::shuffle(keys.begin(), keys.end(), rng.engine());
  }
  return keys;
}

template <class T>
BackendBuffer<T> on(Backend backend, const std::vector<T>& host) {
  BackendBuffer<T> b(backend, std::max<size_t>(host.size(), 1));
  b.upload(host.data(), host.size());
  return b;
}

template <class T>
std::vector<T> back(const BackendBuffer<T>& b, size_t n) {
  std::vector<T> host(n);
  b.download(host.data(), n);
  return host;
}

std::vector<uint8_t> back(const BackendBuffer<bool>& b, size_t n) {
  std::unique_ptr<bool[]> host(new bool[n]);
  b.download(host.get(), n);
  return std::vector<uint8_t>(host.get(), host.get() + n);
}

// A host store that counts writes carrying one key twice in their puts (whose row wins would be
// the store's choice).
class OnceEachStorage final : public storage::Storage {
 public:
  explicit OnceEachStorage(uint32_t dim) : inner_(storage::HostStorageOptions{dim}) {}
  uint32_t row_dim() const override { return inner_.row_dim(); }
  std::string describe() const override { return "once-each:" + inner_.describe(); }
  void find(size_t n, const uint64_t* keys, float* values, uint64_t* scores,
            bool* founds) override {
    inner_.find(n, keys, values, scores, founds);
  }
  void write(size_t n_put, const uint64_t* put_keys, const float* put_values,
             const uint64_t* put_scores, size_t n_erase, const uint64_t* erase_keys) override {
    std::set<uint64_t> seen(put_keys, put_keys + n_put);
    repeated += n_put - seen.size();
    inner_.write(n_put, put_keys, put_values, put_scores, n_erase, erase_keys);
  }
  size_t scan(storage::ScanCursor& cursor, size_t max_rows, uint64_t* keys, float* values,
              uint64_t* scores) override {
    return inner_.scan(cursor, max_rows, keys, values, scores);
  }
  size_t size() override { return inner_.size(); }
  void flush() override {}
  void clear() override { inner_.clear(); }
  storage::StorageStats stats() const override { return inner_.stats(); }
  size_t repeated = 0;

 private:
  storage::HostStorage inner_;
};

// After a run against one big table: every row and score of `cached` is `big`'s and each key is
// in exactly one tier (the fast table or `lower`).
void expect_big_tables_rows_each_in_one_tier(CachedTable<K>& cached, Table<K>& big,
                                             storage::Storage& lower) {
  std::map<K, std::pair<std::vector<float>, uint64_t>> want;
  big.for_each([&](K key, std::span<const float> row, uint64_t score) {
    want[key] = {std::vector<float>(row.begin(), row.end()), score};
  });
  size_t visited = 0;
  cached.for_each([&](K key, std::span<const float> row, uint64_t score) {
    ++visited;
    const auto it = want.find(key);
    ASSERT_NE(it, want.end()) << "key " << key;
    ASSERT_EQ(std::vector<float>(row.begin(), row.end()), it->second.first) << "key " << key;
    EXPECT_EQ(score, it->second.second) << "key " << key;
  });
  EXPECT_EQ(visited, want.size());
  std::map<K, int> tiers;
  cached.fast_table().for_each([&](K key, std::span<const float>, uint64_t) { tiers[key] += 1; });
  storage::ScanCursor cursor;
  constexpr size_t kChunk = 256;
  std::vector<uint64_t> bk(kChunk), bs(kChunk);
  std::vector<float> bv(kChunk * lower.row_dim());
  while (!cursor.done()) {
    const size_t got = lower.scan(cursor, kChunk, bk.data(), bv.data(), bs.data());
    for (size_t i = 0; i < got; ++i) tiers[static_cast<K>(bk[i])] += 1;
  }
  for (const auto& [key, count] : tiers) ASSERT_EQ(count, 1) << "key " << key;
  EXPECT_EQ(tiers.size(), want.size());
}

// As expect_big_tables_rows_each_in_one_tier, and the run showed what such a test needs: the fast
// tier evicted, rows came back up from below, no key of a call was pushed out by its own.
void expect_one_big_tables_rows_in_one_tier(CachedTable<K>& cached, Table<K>& big,
                                            storage::Storage& lower) {
  expect_big_tables_rows_each_in_one_tier(cached, big, lower);
  const storage::CachingStats s = cached.caching_stats();
  EXPECT_GT(s.evictions_written, 0u) << "the fast tier never evicted: the test shows nothing";
  EXPECT_GT(s.lower_hits, 0u) << "no row came back up from below";
  EXPECT_EQ(s.batch_evicted, 0u);
}

class CachedDevice : public BackendTest {};

// The reference for a caching table with fast-tier options `fo`: one CPU table of the same
// options that holds `capacity` rows without evicting (buckets of 128 slots).
std::unique_ptr<Table<K>> big_table_like(const TableOptions& fo, size_t capacity) {
  TableOptions bo = fo;
  bo.init_capacity = bo.max_capacity = capacity;
  bo.bucket_capacity = 128;
  return make_table<K>(Backend::kCpu, bo);
}

// One find_or_insert of `keys` on `cached` (keys and outputs in backend memory) and on `big`
// (host): the same found flags and the same rows out; the flags land in *founds when given.
void find_or_insert_matches_big(Backend backend, CachedTable<K>& cached, Table<K>& big,
                                const std::vector<K>& keys, uint32_t dim,
                                std::vector<uint8_t>* founds = nullptr) {
  const size_t n = keys.size();
  const auto dkeys = on(backend, keys);
  BackendBuffer<float> dvalues(backend, n * dim);
  BackendBuffer<bool> dfound(backend, n);
  cached.find_or_insert(n, dkeys.data(), dvalues.data(), dfound.data());
  std::vector<float> want(n * dim);
  std::unique_ptr<bool[]> fb(new bool[n]);
  big.find_or_insert(n, keys.data(), want.data(), fb.get());
  const auto found = back(dfound, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "]";
  ASSERT_EQ(back(dvalues, n * dim), want);
  if (founds != nullptr) *founds = found;
}

// A training step by address on both tables: `cached` (keys at `dkeys`, backend memory) and `big`
// (host) give every key a row with the same found flag and elements; each row then gets
// row[c] += scale * (c + offset) in both. The rows' addresses land in *ptrs and *big_rows.
void step_by_address(Backend backend, Table<K>& cached, Table<K>& big, const std::vector<K>& keys,
                     const K* dkeys, uint32_t dim, float scale, uint32_t offset,
                     std::vector<float*>* ptrs, std::vector<float*>* big_rows) {
  const size_t n = keys.size();
  BackendBuffer<float*> dptrs(backend, n);
  BackendBuffer<bool> dfound(backend, n);
  cached.find_or_insert_pointers(n, dkeys, dptrs.data(), dfound.data());
  big_rows->assign(n, nullptr);
  std::unique_ptr<bool[]> fb(new bool[n]);
  big.find_or_insert_pointers(n, keys.data(), big_rows->data(), fb.get());
  *ptrs = back(dptrs, n);
  const auto found = back(dfound, n);
  std::vector<float> row(dim);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "] (key " << keys[i] << ")";
    ASSERT_NE((*ptrs)[i], nullptr) << "key " << keys[i];
    copy_from_backend(backend, row.data(), (*ptrs)[i], dim * sizeof(float));
    for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], (*big_rows)[i][c]) << "key " << keys[i];
    for (uint32_t c = 0; c < dim; ++c) row[c] += scale * static_cast<float>(c + offset);
    copy_to_backend(backend, (*ptrs)[i], row.data(), dim * sizeof(float));
    std::copy(row.begin(), row.end(), (*big_rows)[i]);
  }
}

TEST_P(CachedDevice, DevicePathMatchesOneBigTable) {
  const Backend backend = GetParam();
  TestRng rng;
  for (const auto& [policy, private_store] :
       {std::pair{ScorePolicy::kCustomized, false}, std::pair{ScorePolicy::kStep, false},
        std::pair{ScorePolicy::kCustomized, true}, std::pair{ScorePolicy::kStep, true}}) {
    const uint32_t dim = std::vector<uint32_t>{3, 8, 40}[rng.uniform(0, 2)];
    SCOPED_TRACE("policy " + to_string(policy) + ", dim " + std::to_string(dim) +
                 (private_store ? ", private store" : ""));
    TableOptions fo = fast_tier_options(dim, 512, 32, policy, 77);
    fo.num_threads = 1;
    auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
    // A small filter: many keys never written below share bits with some that were.
    CachedTable<K> cached(backend, fo, lower, storage::CachingOptions{private_store, 12});
    auto big = big_table_like(fo, 1 << 15);
    const uint64_t space = 3000;
    for (int round = 0; round < 80; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const bool given = policy == ScorePolicy::kCustomized && rng.chance(0.5);
      const std::vector<K> keys = draw_keys(rng, rng.uniform(1, 200), space, given);
      const size_t n = keys.size();
      std::vector<uint64_t> scores(n);
      for (auto& s : scores) s = rng.uniform(1, 60);
      const auto dkeys = on(backend, keys);
      const auto dscores = on(backend, scores);
      const uint64_t* gs = given ? dscores.data() : nullptr;
      std::unique_ptr<bool[]> fb(new bool[n]);
      switch (rng.uniform(0, 3)) {
        case 0:
        case 1: {  // find_or_insert / find_or_insert_given: rows out
          const bool with_rows = rng.chance(0.5);
          std::vector<float> rows(n * dim);
          for (auto& v : rows) v = static_cast<float>(rng.uniform(0, 4000)) / 16.0f;
          auto dvalues = on(backend, rows);
          BackendBuffer<bool> dfound(backend, n);
          std::vector<float> want = rows;
          if (with_rows) {
            cached.find_or_insert_given(n, dkeys.data(), dvalues.data(), dfound.data(), gs);
            big->find_or_insert_given(n, keys.data(), want.data(), fb.get(),
                                      given ? scores.data() : nullptr);
          } else {
            cached.find_or_insert(n, dkeys.data(), dvalues.data(), dfound.data(), gs);
            big->find_or_insert(n, keys.data(), want.data(), fb.get(),
                                given ? scores.data() : nullptr);
          }
          const auto got = back(dvalues, n * dim);
          const auto found = back(dfound, n);
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "]";
          ASSERT_EQ(got, want) << (with_rows ? "find_or_insert_given" : "find_or_insert");
          break;
        }
        case 2: {  // by address, rows updated in place (a training step)
          BackendBuffer<float*> dptrs(backend, n);
          BackendBuffer<bool> dfound(backend, n);
          std::vector<float*> bp(n);
          cached.find_or_insert_pointers(n, dkeys.data(), dptrs.data(), dfound.data(), gs);
          big->find_or_insert_pointers(n, keys.data(), bp.data(), fb.get(),
                                       given ? scores.data() : nullptr);
          const auto ptrs = back(dptrs, n);
          const auto found = back(dfound, n);
          std::map<float*, size_t> first;  // a repeated key: one row, updated once
          std::vector<float> row(dim);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "]";
            ASSERT_NE(ptrs[i], nullptr) << "key " << keys[i] << ": its bucket had room";
            copy_from_backend(backend, row.data(), ptrs[i], dim * sizeof(float));
            for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], bp[i][c]) << "key " << keys[i];
            if (!first.emplace(ptrs[i], i).second) continue;
            for (uint32_t c = 0; c < dim; ++c) row[c] += 0.5f * static_cast<float>(c + 1);
            copy_to_backend(backend, ptrs[i], row.data(), dim * sizeof(float));
            std::copy(row.begin(), row.end(), bp[i]);
          }
          // The next batch brought up while these rows are held.
          const std::vector<K> next = draw_keys(rng, rng.uniform(1, 300), space, false);
          const auto dnext = on(backend, next);
          cached.prefetch(next.size(), dnext.data());
          break;
        }
        default: {  // read only
          BackendBuffer<float> dvalues(backend, n * dim);
          BackendBuffer<bool> dfound(backend, n);
          BackendBuffer<uint64_t> ds(backend, n);
          std::vector<float> want(n * dim, 0.0f);
          std::vector<uint64_t> want_scores(n, 0);
          backend_zero(backend, dvalues.data(), n * dim * sizeof(float));
          backend_zero(backend, ds.data(), n * sizeof(uint64_t));
          cached.find(n, dkeys.data(), dvalues.data(), dfound.data(), ds.data());
          big->find(n, keys.data(), want.data(), fb.get(), want_scores.data());
          const auto found = back(dfound, n);
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "]";
          ASSERT_EQ(back(dvalues, n * dim), want);
          ASSERT_EQ(back(ds, n), want_scores);
          // By address: rows found below move up first; scores stay as they are.
          BackendBuffer<float*> dptrs(backend, n);
          backend_zero(backend, ds.data(), n * sizeof(uint64_t));
          cached.find_pointers(n, dkeys.data(), dptrs.data(), dfound.data(), ds.data());
          const auto ptrs = back(dptrs, n);
          const auto found2 = back(dfound, n);
          std::vector<float> row(dim);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(found2[i], fb[i]) << "find_pointers founds[" << i << "]";
            if (!fb[i]) continue;
            ASSERT_NE(ptrs[i], nullptr) << "key " << keys[i];
            copy_from_backend(backend, row.data(), ptrs[i], dim * sizeof(float));
            for (uint32_t c = 0; c < dim; ++c)
              ASSERT_EQ(row[c], want[i * dim + c]) << "key " << keys[i];
          }
          ASSERT_EQ(back(ds, n), want_scores);
        }
      }
      if (policy == ScorePolicy::kStep && rng.chance(0.3)) {
        cached.advance_step();
        big->advance_step();
      }
    }
    expect_one_big_tables_rows_in_one_tier(cached, *big, *lower);
    const storage::CachingStats s = cached.caching_stats();
    EXPECT_GT(s.prefetched, 0u);
    if (private_store) EXPECT_GT(s.filtered, 0u) << "the filter never spared a read";
    if (!private_store) EXPECT_EQ(s.filtered, 0u);
  }
}

// A private store's filter starts with the store's rows (a scan at construction) and learns every
// row written down, so no stored row is shadowed by a new one: find_or_insert over a store filled
// beforehand and a fast tier much smaller than the keys gives one big table's rows and founds.
TEST_P(CachedDevice, PrivateStoreFilterKnowsTheStoresRowsAndEveryWriteDown) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = 6;
  const TableOptions fo = fast_tier_options(dim, 128, 32, ScorePolicy::kStep, 9);
  auto big = big_table_like(fo, 1 << 14);
  auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
  // 600 rows stored before the table exists, in the store and in the big table.
  const uint64_t space = 3000;
  const std::vector<K> before = draw_keys(rng, 600, space, true);
  std::vector<uint64_t> before_bits(before.begin(), before.end());
  std::vector<float> before_rows(before.size() * dim);
  for (auto& v : before_rows) v = static_cast<float>(rng.uniform(0, 4000)) / 8.0f;
  std::vector<uint64_t> before_scores(before.size(), 1);
  lower->insert_or_assign(before.size(), before_bits.data(), before_rows.data(),
                          before_scores.data());
  big->insert_or_assign(before.size(), before.data(), before_rows.data(), before_scores.data());
  CachedTable<K> cached(backend, fo, lower, storage::CachingOptions{true, 11});
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::vector<K> keys = draw_keys(rng, rng.uniform(1, 300), space, false);
    ASSERT_NO_FATAL_FAILURE(find_or_insert_matches_big(backend, cached, *big, keys, dim));
    cached.advance_step();
    big->advance_step();
  }
  size_t seen = 0;
  std::vector<float> row(dim);
  std::unique_ptr<bool[]> fb(new bool[1]);
  cached.for_each([&](K key, std::span<const float> got, uint64_t) {
    ++seen;
    big->find(1, &key, row.data(), fb.get(), nullptr);
    ASSERT_TRUE(fb[0]) << "key " << key;
    ASSERT_EQ(std::vector<float>(got.begin(), got.end()), row) << "key " << key;
  });
  EXPECT_EQ(seen, big->size());
  const storage::CachingStats s = cached.caching_stats();
  EXPECT_GT(s.filtered, 0u);
  EXPECT_GT(s.lower_hits, 0u);
  EXPECT_GT(s.evictions_written, 0u);
}

// Batches many times larger than the fast tier rewrite rows it holds: a key whose old row is
// pushed out by an earlier key of the batch and whose new row is then pushed out (or refused) too
// leaves twice; only the new row may reach the lower tier.
TEST_P(CachedDevice, BatchesLargerThanTheFastTierKeepTheirNewRows) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = 4;
  TableOptions fo;
  fo.dim = dim;
  fo.init_capacity = fo.max_capacity = 64;
  fo.bucket_capacity = 16;
  fo.max_load_factor = 1.0;
  fo.score_policy = ScorePolicy::kStep;
  auto lower = std::make_shared<OnceEachStorage>(dim);
  CachedTable<K> cached(backend, fo, lower);
  const size_t space = 4000;
  std::vector<K> all(space);
  for (size_t i = 0; i < space; ++i) all[i] = static_cast<K>(i * 7919 + 3);
  const auto row_of = [&](K key, int version, uint32_t c) {
    return static_cast<float>(key % 1000) + 0.25f * static_cast<float>(c) + 1000.0f * version;
  };
  for (int version = 1; version <= 3; ++version) {
    std::shuffle(all.begin(), all.end(), rng.engine());
    const size_t batch = version == 1 ? 500 : 1500;
    for (size_t first = 0; first < space; first += batch) {
      const size_t n = std::min(batch, space - first);
      const std::vector<K> keys(all.begin() + first, all.begin() + first + n);
      std::vector<float> rows(n * dim);
      for (size_t i = 0; i < n; ++i)
        for (uint32_t c = 0; c < dim; ++c) rows[i * dim + c] = row_of(keys[i], version, c);
      const auto dkeys = on(backend, keys);
      const auto drows = on(backend, rows);
      if (version == 1) {  // new keys: the device path
        BackendBuffer<bool> dfound(backend, n);
        BackendBuffer<float> dvalues = on(backend, rows);
        cached.find_or_insert_given(n, dkeys.data(), dvalues.data(), dfound.data());
      } else {
        cached.insert_or_assign(n, dkeys.data(), drows.data());
      }
      cached.advance_step();
    }
  }
  size_t seen = 0;
  cached.for_each([&](K key, std::span<const float> row, uint64_t) {
    ++seen;
    for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], row_of(key, 3, c)) << "key " << key;
  });
  EXPECT_EQ(seen, space);
  EXPECT_EQ(cached.size(), space);
  EXPECT_EQ(lower->repeated, 0u) << "a write down carried a key twice";
}

// A batch of new keys larger than the fast tier: the rows of the keys pushed straight back down
// still come out (the initializer's rows, as one big table gives them), only later copies of a
// key found; over a shared store and over a private one (whose new keys go in from the device).
TEST_P(CachedDevice, NewRowsPushedStraightDownStillComeOut) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = 5;
  for (const bool private_store : {false, true}) {
    SCOPED_TRACE(private_store ? "private store" : "shared store");
    const TableOptions fo = fast_tier_options(dim, 64, 16, ScorePolicy::kStep, 21);
    auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
    CachedTable<K> cached(backend, fo, lower, storage::CachingOptions{private_store, 20});
    auto big = big_table_like(fo, 4096);
    std::vector<K> keys = draw_keys(rng, 600, 1u << 30, true);
    for (int copy = 0; copy < 150; ++copy) keys.push_back(keys[rng.uniform(0, 599)]);
    std::shuffle(keys.begin(), keys.end(), rng.engine());
    std::vector<uint8_t> found;
    ASSERT_NO_FATAL_FAILURE(find_or_insert_matches_big(backend, cached, *big, keys, dim, &found));
    std::set<K> earlier;
    for (size_t i = 0; i < keys.size(); ++i)
      ASSERT_EQ(found[i] != 0, !earlier.insert(keys[i]).second) << "founds[" << i << "]";
    const storage::CachingStats s = cached.caching_stats();
    EXPECT_GT(s.batch_evicted, 0u) << "no key went straight down";
    EXPECT_EQ(s.filtered, private_store ? 600u : 0u);
    EXPECT_EQ(cached.size(), 600u);
    // By address, a second batch of new keys (copies too): addresses of the keys that stayed,
    // nullptr for those pushed straight down (counted), rows below all the same.
    std::vector<K> more = draw_keys(rng, 100, 1u << 30, true);
    for (int copy = 0; copy < 30; ++copy) more.push_back(more[rng.uniform(0, 99)]);
    const auto dmore = on(backend, more);
    BackendBuffer<float*> dptrs(backend, more.size());
    BackendBuffer<bool> dmf(backend, more.size());
    cached.find_or_insert_pointers(more.size(), dmore.data(), dptrs.data(), dmf.data());
    std::vector<float> mwant(more.size() * dim);
    std::unique_ptr<bool[]> mfb(new bool[more.size()]);
    big->find_or_insert(more.size(), more.data(), mwant.data(), mfb.get());
    const auto mf = back(dmf, more.size());
    const auto ptrs = back(dptrs, more.size());
    std::vector<float> row(dim);
    for (size_t i = 0; i < more.size(); ++i) {
      ASSERT_EQ(mf[i], mfb[i]) << "founds[" << i << "]";
      if (ptrs[i] == nullptr) continue;
      copy_from_backend(backend, row.data(), ptrs[i], dim * sizeof(float));
      for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], mwant[i * dim + c]) << "key " << more[i];
    }
    EXPECT_EQ(cached.caching_stats().filtered, private_store ? 700u : 0u);
    EXPECT_EQ(cached.size(), 700u);
    BackendBuffer<float> dall(backend, more.size() * dim);
    cached.find(more.size(), dmore.data(), dall.data(), dmf.data(), nullptr);
    ASSERT_EQ(back(dall, more.size() * dim), mwant);
  }
}

// find_or_insert calls over a private store whose misses are all new run staged on the device:
// hot keys found in the fast tier (and copies of them) beside new keys (and copies), the fast
// tier evicting older rows to make room and now and then a batch larger than it (its own new
// keys pushed straight down, never a key it found: every later call stays staged), against one
// big table: every call's rows and founds, and at the end every row and score, each key in one
// tier.
TEST_P(CachedDevice, StagedCallsMatchOneBigTable) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = 12;
  const TableOptions fo = fast_tier_options(dim, 256, 32, ScorePolicy::kStep, 31);
  auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
  CachedTable<K> cached(backend, fo, lower, storage::CachingOptions{true, 22});
  auto big = big_table_like(fo, 1 << 14);
  const std::vector<K> hot = draw_keys(rng, 40, 1u << 20, true);
  K next_new = K{1} << 21;  // new keys: never seen before
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<K> keys;
    const size_t fresh = round % 9 == 8 ? 300 : rng.uniform(0, 70);
    for (size_t i = 0; i < fresh; ++i) keys.push_back(next_new + static_cast<K>(i * 13));
    next_new += static_cast<K>(fresh * 13);
    for (size_t c = 0, copies = rng.uniform(0, 20); c < copies && fresh > 0; ++c)
      keys.push_back(keys[rng.uniform(0, fresh - 1)]);
    keys.insert(keys.end(), hot.begin(), hot.end());  // found from round 1 on, never pushed out
    for (size_t i = 0, m = rng.uniform(0, 40); i < m; ++i)
      keys.push_back(hot[rng.uniform(0, hot.size() - 1)]);
    std::shuffle(keys.begin(), keys.end(), rng.engine());
    ASSERT_NO_FATAL_FAILURE(find_or_insert_matches_big(backend, cached, *big, keys, dim));
    if (rng.chance(0.5)) {
      cached.advance_step();
      big->advance_step();
    }
  }
  expect_big_tables_rows_each_in_one_tier(cached, *big, *lower);
  const storage::CachingStats s = cached.caching_stats();
  std::cout << "staged calls " << s.staged_calls << " (fell back " << s.staged_call_fallbacks
            << "), evictions written " << s.evictions_written << ", batch keys pushed out "
            << s.batch_evicted << "\n";
  EXPECT_EQ(s.staged_calls, 40u) << "every call's misses were new";
  EXPECT_GT(s.evictions_written, s.batch_evicted) << "the fast tier never made room";
  EXPECT_GT(s.batch_evicted, 0u) << "no batch pushed its own new keys straight down";
}

// After prefetch_step the next address call reads nothing back: the keys the prefetch brought up
// (or created) are served as by a synchronizing call; a key beyond it gets no row and is counted.
TEST_P(CachedDevice, AStepBeyondItsPrefetchGetsNoRowForTheRest) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = 8;
  const TableOptions fo = fast_tier_options(dim, 512, 32, ScorePolicy::kStep, 9);
  CachedTable<K> cached(backend, fo,
                        std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim}));
  auto big = big_table_like(fo, 1 << 14);
  // Some keys stored first (they go below as the fast tier overflows), then a step's keys.
  for (int round = 0; round < 6; ++round) {
    const std::vector<K> keys = draw_keys(rng, 300, 5000, true);
    const auto dkeys = on(backend, keys);
    BackendBuffer<float> dvalues(backend, keys.size() * dim);
    std::vector<float> values(keys.size() * dim);
    cached.find_or_insert(keys.size(), dkeys.data(), dvalues.data(), nullptr);
    big->find_or_insert(keys.size(), keys.data(), values.data(), nullptr);
  }
  const std::vector<K> step = draw_keys(rng, 150, 5000, true);
  const auto dstep = on(backend, step);
  cached.prefetch_step(step.size(), dstep.data());
  std::vector<K> asked = step;
  const std::vector<K> beyond{K{7000001}, K{7000002}};  // never stored, not prefetched
  asked.insert(asked.end(), beyond.begin(), beyond.end());
  const size_t n = asked.size();
  const auto dasked = on(backend, asked);
  BackendBuffer<float*> dptrs(backend, n);
  BackendBuffer<bool> dfound(backend, n);
  cached.find_or_insert_pointers(n, dasked.data(), dptrs.data(), dfound.data());
  std::vector<float*> bp(step.size());
  std::unique_ptr<bool[]> bf(new bool[step.size()]);
  big->find_or_insert_pointers(step.size(), step.data(), bp.data(), bf.get());
  const auto ptrs = back(dptrs, n);
  const auto found = back(dfound, n);
  std::vector<float> row(dim);
  for (size_t i = 0; i < step.size(); ++i) {
    ASSERT_EQ(found[i], bf[i]) << "key " << step[i];
    ASSERT_NE(ptrs[i], nullptr) << "key " << step[i];
    copy_from_backend(backend, row.data(), ptrs[i], dim * sizeof(float));
    for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], bp[i][c]) << "key " << step[i];
  }
  for (size_t i = step.size(); i < n; ++i) {
    EXPECT_EQ(ptrs[i], nullptr) << "key " << asked[i];
    EXPECT_FALSE(found[i]) << "key " << asked[i];
  }
  storage::CachingStats s = cached.caching_stats();
  EXPECT_EQ(s.unsynced_calls, 1u);
  EXPECT_EQ(s.unserved, beyond.size());
  // The next call synchronizes again and creates them.
  const auto dbeyond = on(backend, beyond);
  BackendBuffer<float*> dp2(backend, beyond.size());
  BackendBuffer<bool> df2(backend, beyond.size());
  cached.find_or_insert_pointers(beyond.size(), dbeyond.data(), dp2.data(), df2.data());
  for (float* p : back(dp2, beyond.size())) EXPECT_NE(p, nullptr);
  for (const uint8_t f : back(df2, beyond.size())) EXPECT_FALSE(f);
  s = cached.caching_stats();
  EXPECT_EQ(s.unsynced_calls, 1u);
  EXPECT_EQ(s.unserved, beyond.size());
}

// Reserved keys among a batch's misses (with copies of the other keys): ERROR refuses the call,
// naming the first position holding one, and changes nothing; IGNORE skips them (not found, their
// rows left as given) while the other keys get the rows and founds of one CPU table.
TEST_P(CachedDevice, ReservedKeysAmongTheMissesAreRefusedOrSkipped) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = 8;
  for (const SafeCheck mode : {SafeCheck::kError, SafeCheck::kIgnore}) {
    SCOPED_TRACE(mode == SafeCheck::kError ? "ERROR" : "IGNORE");
    TableOptions fo = fast_tier_options(dim, 256, 32, ScorePolicy::kStep, 5);
    fo.safe_check = mode;
    auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
    CachedTable<K> cached(backend, fo, lower);
    TableOptions bo = fo;
    bo.init_capacity = bo.max_capacity = 4096;
    bo.safe_check = SafeCheck::kIgnore;
    auto big = make_table<K>(Backend::kCpu, bo);
    // A batch of 400 draws of 150 keys, two reserved keys at random positions (one repeated).
    const size_t n = 400;
    std::vector<K> keys = draw_keys(rng, n, 150, false);
    const K reserved_a = static_cast<K>(kFirstReservedKey + rng.uniform(0, 15));
    const K reserved_b = static_cast<K>(kFirstReservedKey + rng.uniform(0, 15));
    std::vector<size_t> at{rng.uniform(0, n - 1), rng.uniform(0, n - 1), rng.uniform(0, n - 1)};
    keys[at[0]] = reserved_a;
    keys[at[1]] = reserved_b;
    keys[at[2]] = reserved_a;
    const size_t first_reserved = *std::min_element(at.begin(), at.end());
    std::vector<float> rows(n * dim);
    for (auto& v : rows) v = static_cast<float>(rng.uniform(0, 4000)) / 16.0f;
    const auto dkeys = on(backend, keys);
    auto dvalues = on(backend, rows);
    BackendBuffer<bool> dfound(backend, n);
    if (mode == SafeCheck::kError) {
      try {
        cached.find_or_insert(n, dkeys.data(), dvalues.data(), dfound.data());
        FAIL() << "a reserved key was accepted";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("keys[" + std::to_string(first_reserved) + "]"), std::string::npos)
            << what;
      }
      EXPECT_EQ(cached.size(), 0u) << "the refused call stored rows";
      EXPECT_EQ(back(dvalues, n * dim), rows) << "the refused call wrote rows out";
      continue;
    }
    cached.find_or_insert(n, dkeys.data(), dvalues.data(), dfound.data());
    std::vector<float> want = rows;
    std::unique_ptr<bool[]> fb(new bool[n]);
    big->find_or_insert(n, keys.data(), want.data(), fb.get());
    const auto found = back(dfound, n);
    const auto got = back(dvalues, n * dim);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "] (key " << keys[i] << ")";
      for (uint32_t c = 0; c < dim; ++c)
        ASSERT_EQ(got[i * dim + c], want[i * dim + c]) << "row " << i << " (key " << keys[i] << ")";
    }
    EXPECT_FALSE(found[at[0]] || found[at[1]] || found[at[2]]);
    EXPECT_EQ(cached.size(), big->size());
  }
}

// Training steps over a private store with the next batch prefetched by prefetch_step: a batch
// whose missed keys the filter shows stored nowhere is staged on the device (no host wait), what
// it evicts is written down by the next call; a batch revisiting rows below falls back. Every
// step's founds and rows (updated in place), and at the end every row, score and tier, against
// one CPU table.
TEST_P(CachedDevice, StagedPrefetchStepsMatchOneBigTable) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = std::vector<uint32_t>{5, 8, 33}[rng.uniform(0, 2)];
  SCOPED_TRACE("dim " + std::to_string(dim));
  const TableOptions fo = fast_tier_options(dim, 1024, 32, ScorePolicy::kStep, 21);
  auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
  CachedTable<K> cached(backend, fo, lower, storage::CachingOptions{true, 16, true});
  auto big = big_table_like(fo, 1 << 15);
  // Step s: fresh ids (never seen: staged), plus now and then ids seen long ago (below: the
  // prefetch falls back) or just now (in the fast tier: staged all the same).
  K next_id = 1;
  std::vector<K> seen;
  const auto make_step = [&] {
    std::vector<K> keys;
    const size_t fresh = rng.uniform(20, 120);
    for (size_t i = 0; i < fresh; ++i) keys.push_back(next_id++);
    if (!seen.empty() && rng.chance(0.15)) {  // from long ago: below by now
      for (int i = 0; i < 5; ++i) keys.push_back(seen[rng.uniform(0, seen.size() / 4)]);
    }
    if (seen.size() > 50 && rng.chance(0.5)) {  // from the last steps: still up
      for (int i = 0; i < 10; ++i) keys.push_back(seen[seen.size() - 1 - rng.uniform(0, 49)]);
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::shuffle(keys.begin(), keys.end(), rng.engine());
    seen.insert(seen.end(), keys.begin(), keys.end());
    return keys;
  };
  std::vector<K> keys = make_step();
  // The batch's keys on the backend: a prefetch's keys stay unchanged until the next call.
  BackendBuffer<K> dkeys = on(backend, keys);
  for (int step = 0; step < 120; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const size_t n = keys.size();
    std::vector<float*> ptrs, bp;
    ASSERT_NO_FATAL_FAILURE(step_by_address(backend, cached, *big, keys, dkeys.data(), dim, 0.25f,
                                            step % 7, &ptrs, &bp));
    std::vector<float> row(dim);
    // The next batch, brought up while these rows are held (they must not move).
    std::vector<K> next = make_step();
    BackendBuffer<K> dnext = on(backend, next);
    cached.prefetch_step(next.size(), dnext.data());
    for (size_t i = 0; i < n; ++i) {  // the held rows are where they were, with their updates
      copy_from_backend(backend, row.data(), ptrs[i], dim * sizeof(float));
      for (uint32_t c = 0; c < dim; ++c) ASSERT_EQ(row[c], bp[i][c]) << "held key " << keys[i];
    }
    cached.advance_step();
    big->advance_step();
    keys = std::move(next);
    dkeys = std::move(dnext);
  }
  {  // the last batch prefetched: used by a last lookup on both
    BackendBuffer<float*> dptrs(backend, keys.size());
    cached.find_or_insert_pointers(keys.size(), dkeys.data(), dptrs.data(), nullptr);
    std::vector<float*> bp(keys.size());
    big->find_or_insert_pointers(keys.size(), keys.data(), bp.data(), nullptr);
  }
  expect_one_big_tables_rows_in_one_tier(cached, *big, *lower);
  const storage::CachingStats s = cached.caching_stats();
  std::cout << "staged " << s.staged_prefetches << ", fell back " << s.staged_fallbacks
            << ", unsynchronized calls " << s.unsynced_calls << ", evictions written "
            << s.evictions_written << std::endl;
  EXPECT_GT(s.staged_prefetches, s.staged_fallbacks) << "no prefetch ran on the device";
  EXPECT_GT(s.staged_fallbacks, 0u) << "no staged prefetch met a row below";
  EXPECT_GT(s.unsynced_calls, 0u);
  EXPECT_EQ(s.unserved, 0u);
  EXPECT_EQ(s.prefetch_refused, 0u);
}

// A staged prefetch whose new keys overflow their buckets (more than the fast tier holds): the
// keys refused go down with their new rows and real scores when the next call settles it, the
// next call does not trust the prefetch, and every key reads back its initial row from one tier.
TEST_P(CachedDevice, StagedPrefetchRefusalsGoDownWithTheirRows) {
  const Backend backend = GetParam();
  TestRng rng;
  const uint32_t dim = 4;
  const TableOptions fo = fast_tier_options(dim, 64, 32, ScorePolicy::kStep, 13);
  auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
  CachedTable<K> cached(backend, fo, lower, storage::CachingOptions{true, 14, true});
  auto big = big_table_like(fo, 1 << 12);
  std::vector<K> keys = draw_keys(rng, 150, 1'000'000, true);
  const size_t n = keys.size();
  const auto dkeys = on(backend, keys);
  cached.prefetch_step(n, dkeys.data());
  storage::CachingStats s = cached.caching_stats();  // settles it
  EXPECT_EQ(s.staged_prefetches, 1u);
  EXPECT_EQ(s.staged_fallbacks, 0u);
  EXPECT_GE(s.prefetch_refused, n - 64) << "at most 64 of " << n << " keys fit";
  EXPECT_EQ(s.evictions_written, s.prefetch_refused);
  EXPECT_EQ(lower->size(), s.prefetch_refused) << "the refused rows are below";
  EXPECT_EQ(cached.size(), n) << "every key of the prefetch is in one tier";
  // The next address call synchronizes (no trust after a refusal) and reports them as new.
  BackendBuffer<float*> dptrs(backend, n);
  BackendBuffer<bool> dfound(backend, n);
  cached.find_or_insert_pointers(n, dkeys.data(), dptrs.data(), dfound.data());
  for (const uint8_t f : back(dfound, n)) EXPECT_FALSE(f);
  // Read back: every key stored (found), its initial row, the step's score, in one tier.
  BackendBuffer<float> dvalues(backend, n * dim);
  BackendBuffer<uint64_t> dscores(backend, n);
  cached.find(n, dkeys.data(), dvalues.data(), dfound.data(), dscores.data());
  std::vector<float> want(n * dim);
  big->find_or_insert(n, keys.data(), want.data(), nullptr);
  for (const uint8_t f : back(dfound, n)) ASSERT_TRUE(f);
  ASSERT_EQ(back(dvalues, n * dim), want);
  for (const uint64_t score : back(dscores, n)) EXPECT_EQ(score, cached.score());
  EXPECT_EQ(cached.size(), n);
  s = cached.caching_stats();
  EXPECT_EQ(s.unsynced_calls, 0u);
  EXPECT_EQ(cached.size(), n);
}

// CachingOptions::max_call_keys: the device path's buffers are sized at construction, so calls of
// up to that many keys allocate nothing (caching_stats().buffer_growths stays 0) while they miss,
// evict and stage prefetches and calls on the device; the results equal one big table's. A
// larger call still works, and grows them.
TEST_P(CachedDevice, CallsWithinTheReservationAllocateNothing) {
  const Backend backend = GetParam();
  TestRng rng;
  for (const bool private_store : {false, true}) {
    const uint32_t dim = std::vector<uint32_t>{3, 8, 40}[rng.uniform(0, 2)];
    SCOPED_TRACE("dim " + std::to_string(dim) + (private_store ? ", private store" : ""));
    const TableOptions fo = fast_tier_options(dim, 2048, 32, ScorePolicy::kStep, 5);
    auto lower = std::make_shared<storage::HostStorage>(storage::HostStorageOptions{dim});
    storage::CachingOptions co;
    co.private_store = private_store;
    co.filter_log2_bits = 14;
    co.max_call_keys = 300;
    CachedTable<K> cached(backend, fo, lower, co);
    EXPECT_EQ(cached.caching_stats().buffer_growths, 0u) << "the reservation is not a growth";
    auto big = big_table_like(fo, 1 << 15);
    // Keys of [0, 3000), then now and then keys far above (bit 40) too.
    const auto draw = [&](int round, size_t n, bool distinct) {
      std::vector<K> keys = draw_keys(rng, n, 3000, distinct);
      if (round >= 45) keys.front() = (K{1} << 40) + static_cast<K>(rng.uniform(0, 400));
      if (distinct) {
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        std::shuffle(keys.begin(), keys.end(), rng.engine());
      }
      return keys;
    };
    // The batch a step will look up, prefetched by the step before (prefetch_step).
    std::vector<K> step_keys = draw(0, rng.uniform(1, 300), true);
    BackendBuffer<K> step_dkeys = on(backend, step_keys);
    for (int round = 0; round < 70; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      {  // a training step: by address, updated in place
        std::vector<float*> ptrs, bp;
        ASSERT_NO_FATAL_FAILURE(step_by_address(backend, cached, *big, step_keys, step_dkeys.data(),
                                                dim, 0.5f, 1, &ptrs, &bp));
      }
      if (rng.chance(0.4)) {  // rows out, repeats kept
        const std::vector<K> keys = draw(round, rng.uniform(1, 300), false);
        const size_t n = keys.size();
        const auto dkeys = on(backend, keys);
        std::vector<float> rows(n * dim);
        for (auto& v : rows) v = static_cast<float>(rng.uniform(0, 4000)) / 16.0f;
        auto dvalues = on(backend, rows);
        BackendBuffer<bool> dfound(backend, n);
        std::vector<float> want = rows;
        std::unique_ptr<bool[]> fb(new bool[n]);
        if (rng.chance(0.5)) {
          cached.find_or_insert_given(n, dkeys.data(), dvalues.data(), dfound.data());
          big->find_or_insert_given(n, keys.data(), want.data(), fb.get());
        } else {
          cached.find_or_insert(n, dkeys.data(), dvalues.data(), dfound.data());
          big->find_or_insert(n, keys.data(), want.data(), fb.get());
        }
        const auto found = back(dfound, n);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "]";
        ASSERT_EQ(back(dvalues, n * dim), want);
      }
      // The next step's batch, prefetched (its new keys created: reported new by that step).
      std::vector<K> next = draw(round, rng.uniform(1, 300), true);
      BackendBuffer<K> dnext = on(backend, next);
      cached.prefetch_step(next.size(), dnext.data());
      step_keys = std::move(next);
      step_dkeys = std::move(dnext);
      ASSERT_EQ(cached.caching_stats().buffer_growths, 0u) << "a call within the reservation grew";
      cached.advance_step();
      big->advance_step();
    }
    {  // the last batch prefetched: used by a last lookup on both
      BackendBuffer<float*> dptrs(backend, step_keys.size());
      cached.find_or_insert_pointers(step_keys.size(), step_dkeys.data(), dptrs.data(), nullptr);
      std::vector<float*> bp(step_keys.size());
      big->find_or_insert_pointers(step_keys.size(), step_keys.data(), bp.data(), nullptr);
    }
    ASSERT_EQ(cached.caching_stats().buffer_growths, 0u) << "a call within the reservation grew";
    // Beyond the reservation: it works, and grows.
    const std::vector<K> keys = draw_keys(rng, 900, 1 << 20, true);
    const auto dkeys = on(backend, keys);
    BackendBuffer<float> dvalues(backend, keys.size() * dim);
    BackendBuffer<bool> dfound(backend, keys.size());
    std::vector<float> want(keys.size() * dim);
    std::unique_ptr<bool[]> fb(new bool[keys.size()]);
    cached.find_or_insert(keys.size(), dkeys.data(), dvalues.data(), dfound.data());
    big->find_or_insert(keys.size(), keys.data(), want.data(), fb.get());
    const auto found = back(dfound, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(found[i], fb[i]) << "founds[" << i << "]";
    ASSERT_EQ(back(dvalues, keys.size() * dim), want);
    expect_one_big_tables_rows_in_one_tier(cached, *big, *lower);
    const storage::CachingStats s = cached.caching_stats();
    std::cout << (private_store ? "private" : "shared") << ": staged prefetches "
              << s.staged_prefetches << " (fell back " << s.staged_fallbacks << "), staged calls "
              << s.staged_calls << ", evictions written " << s.evictions_written
              << ", growths once a call exceeded the reservation " << s.buffer_growths << std::endl;
    EXPECT_GT(s.buffer_growths, 0u) << "a call of 900 keys fit a reservation of 300";
    EXPECT_GT(s.evictions_written, 0u);
    if (private_store) {
      EXPECT_GT(s.staged_prefetches, 0u);
    } else {
      EXPECT_EQ(s.staged_prefetches, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CachedDevice, all_backends(), backend_name);

}  // namespace
}  // namespace dynemb::testing

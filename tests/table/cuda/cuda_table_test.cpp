// CUDA-specific behaviour: hybrid memory (rows in pinned host memory), growth by rehash on the
// GPU, and use from several threads on several streams; each checked against a host model.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/cuda_test_util.hpp"
#include "table/cuda/device_layout.hpp"

namespace dynemb::testing {
namespace {

constexpr Backend kGpu = Backend::kCuda;

std::vector<float> rows_for(const std::vector<uint64_t>& keys, uint32_t dim, float salt) {
  std::vector<float> v(keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (uint32_t j = 0; j < dim; ++j) {
      v[i * dim + j] = static_cast<float>(keys[i] % 10007) + 0.5f * static_cast<float>(j) + salt;
    }
  }
  return v;
}

using Model = std::map<uint64_t, std::vector<float>>;

// Row i of row-major rows of `dim` floats.
std::vector<float> row_at(const std::vector<float>& rows, size_t i, uint32_t dim) {
  return {rows.begin() + i * dim, rows.begin() + (i + 1) * dim};
}

// insert_or_assign of `values` under `keys`, and the same rows into the model.
void insert_rows(Table<uint64_t>& t, Model& model, const std::vector<uint64_t>& keys,
                 const std::vector<float>& values) {
  const uint32_t dim = t.options().dim;
  auto k = upload(kGpu, keys);
  auto v = upload(kGpu, values);
  t.insert_or_assign(keys.size(), k.data(), v.data());
  for (size_t i = 0; i < keys.size(); ++i) model[keys[i]] = row_at(values, i, dim);
}

// n keys from distinct_keys, skipping any whose bucket among `buckets` already holds `cap` keys
// (counted in `per_bucket`): so that many buckets never overflow, and nothing evicts.
std::vector<uint64_t> keys_under_cap(TestRng& rng, size_t n, std::set<uint64_t>& seen,
                                     std::map<uint64_t, uint32_t>& per_bucket, uint64_t buckets,
                                     uint32_t cap) {
  std::vector<uint64_t> keys;
  while (keys.size() < n) {
    const uint64_t k = distinct_keys(rng, 1, seen).front();
    uint32_t& held = per_bucket[bucket_of_hash(hash_key_bits(k), buckets)];
    if (held < cap) {
      ++held;
      keys.push_back(k);
    }
  }
  return keys;
}

// Checks every model key is stored with its row.
void expect_rows(Table<uint64_t>& t, const Model& model) {
  const auto stored = dump(t);
  ASSERT_EQ(stored.size(), model.size());
  for (const auto& [key, row] : model) {
    auto it = stored.find(key);
    ASSERT_NE(it, stored.end()) << "key " << key << " lost";
    ASSERT_EQ(it->second.row, row) << "key " << key;
  }
}

TEST(CudaTable, HybridRowsInHostMemoryBehaveLikeHbmRows) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  TableOptions o;
  o.dim = 12;
  o.bucket_capacity = 128;
  o.init_capacity = 128 * 4;
  o.max_capacity = 128 * 32;
  o.max_load_factor = 1.0;
  o.score_policy = ScorePolicy::kStep;
  o.safe_check = SafeCheck::kIgnore;
  o.max_hbm_for_values = 128ull * 8 * o.dim * sizeof(float) + 100;  // a quarter of max rows
  auto t = make_table<uint64_t>(kGpu, o);
  std::set<uint64_t> seen;
  Model model;
  // Grow to max capacity through inserts, then overwrite and accumulate. No bucket of the full
  // table gets more than 120 of the 3000 keys: drawn freely, one in about 500 seeds put 131 in one
  // of the 32 buckets, and its evictions failed the size check.
  std::map<uint64_t, uint32_t> per_bucket;
  for (int round = 0; round < 6; ++round) {
    const auto keys =
        keys_under_cap(rng, 500, seen, per_bucket, o.max_capacity / o.bucket_capacity, 120);
    insert_rows(*t, model, keys, rows_for(keys, o.dim, static_cast<float>(round)));
  }
  EXPECT_EQ(t->capacity(), o.max_capacity);
  EXPECT_EQ(t->size(), model.size());
  expect_rows(*t, model);

  // find through both memories.
  std::vector<uint64_t> all;
  for (const auto& [key, row] : model) all.push_back(key);
  auto k = upload(kGpu, all);
  BackendBuffer<float> out(kGpu, all.size() * o.dim);
  BackendBuffer<bool> founds(kGpu, all.size());
  t->find(all.size(), k.data(), out.data(), founds.data(), nullptr);
  const auto hv = download(out, all.size() * o.dim);
  const auto hf = download_flags(kGpu, founds, all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_TRUE(hf[i]);
    ASSERT_EQ(row_at(hv, i, o.dim), model[all[i]]);
  }

  // insert_and_evict works in hybrid mode: fill past capacity and account for every row.
  size_t evicted_total = 0;
  for (int round = 0; round < 3; ++round) {
    t->advance_step();
    const auto keys = distinct_keys(rng, 1000, seen);
    const auto values = rows_for(keys, o.dim, 100.0f + round);
    auto kk = upload(kGpu, keys);
    auto vv = upload(kGpu, values);
    BackendBuffer<uint64_t> ek(kGpu, keys.size());
    BackendBuffer<float> ev(kGpu, keys.size() * o.dim);
    BackendBuffer<uint64_t> es(kGpu, keys.size());
    const size_t count = t->insert_and_evict(keys.size(), kk.data(), vv.data(), nullptr, ek.data(),
                                             ev.data(), es.data());
    for (size_t i = 0; i < keys.size(); ++i) model[keys[i]] = row_at(values, i, o.dim);
    const auto hk = download(ek, count);
    const auto hev = download(ev, count * o.dim);
    for (size_t i = 0; i < count; ++i) {
      auto it = model.find(hk[i]);
      ASSERT_NE(it, model.end()) << "evicted an unknown key " << hk[i];
      ASSERT_EQ(row_at(hev, i, o.dim), it->second);
      model.erase(it);
    }
    evicted_total += count;
  }
  EXPECT_GT(evicted_total, 0u);
  EXPECT_EQ(t->stats().evictions + t->stats().refused, evicted_total);
  expect_rows(*t, model);
}

TEST(CudaTable, GrowthKeepsEveryKeyAndDoublesUntilMax) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  TableOptions o;
  o.dim = 4;
  o.bucket_capacity = 16;
  o.init_capacity = 16;
  o.max_capacity = 16 << 14;  // never reached: only the load factor drives growth
  o.max_load_factor = 0.5;
  o.score_policy = ScorePolicy::kLfu;
  o.safe_check = SafeCheck::kError;
  auto t = make_table<uint64_t>(kGpu, o);
  std::set<uint64_t> seen;
  Model model;
  for (size_t batch : {1u, 7u, 100u, 3000u, 20000u}) {
    const auto keys = distinct_keys(rng, batch, seen);
    insert_rows(*t, model, keys, rows_for(keys, o.dim, 1.0f));
    const size_t size = t->size();
    ASSERT_EQ(size, model.size());
    EXPECT_LE(static_cast<double>(size), o.max_load_factor * static_cast<double>(t->capacity()));
    // The capacity is the smallest doubling that kept the load factor (or a full bucket forced
    // more).
    EXPECT_GE(t->capacity(), static_cast<size_t>(size / o.max_load_factor));
  }
  EXPECT_EQ(t->stats().evictions, 0u);
  EXPECT_EQ(t->stats().refused, 0u);
  EXPECT_GT(t->stats().rehashes, 0u);
  expect_rows(*t, model);
  // reserve past max is refused, below max doubles.
  EXPECT_THROW(t->reserve(o.max_capacity * 2), InvalidArgument);
  t->reserve(o.max_capacity);
  EXPECT_EQ(t->capacity(), o.max_capacity);
  expect_rows(*t, model);
}

TEST(CudaTable, ThreadsOnTheirOwnStreamsSeeTheirWrites) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  TableOptions o;
  o.dim = 8;
  o.bucket_capacity = 128;
  o.init_capacity = 128 * 8;
  o.max_capacity = 128 * 1024;
  o.score_policy = ScorePolicy::kTimestamp;
  o.safe_check = SafeCheck::kIgnore;
  auto t = make_table<uint64_t>(kGpu, o);
  constexpr int kThreads = 6;
  constexpr int kRounds = 20;
  std::vector<std::vector<uint64_t>> keys(kThreads);
  std::set<uint64_t> seen;
  for (auto& k : keys) k = distinct_keys(rng, 2000, seen);
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      const auto& mine = keys[w];
      auto k = upload(kGpu, mine);
      BackendBuffer<float> out(kGpu, mine.size() * o.dim);
      BackendBuffer<bool> founds(kGpu, mine.size());
      for (int r = 0; r < kRounds; ++r) {
        const auto values = rows_for(mine, o.dim, static_cast<float>(r));
        auto v = upload(kGpu, values);
        t->insert_or_assign(mine.size(), k.data(), v.data(), nullptr, stream);
        t->find(mine.size(), k.data(), out.data(), founds.data(), nullptr, stream);
        cudaStreamSynchronize(stream);
        const auto got = download(out, mine.size() * o.dim);
        const auto f = download_flags(kGpu, founds, mine.size());
        if (got != values || std::count(f.begin(), f.end(), 0) != 0) ++failures[w];
        // A reader on the same keys from another stream, unsynchronized with our writes.
        if (r % 5 == 0) (void)t->size(stream);
      }
      cudaStreamDestroy(stream);
    });
  }
  for (auto& th : threads) th.join();
  for (int w = 0; w < kThreads; ++w) EXPECT_EQ(failures[w], 0) << "thread " << w;
  EXPECT_EQ(t->size(), static_cast<size_t>(kThreads) * 2000);
}

TEST(CudaTable, DuplicateKeysInOneBatchCountEveryCopy) {
  DYNEMB_REQUIRE_CUDA();
  TestRng rng;
  TableOptions o;
  o.dim = 4;
  o.init_capacity = 128 * 4;
  o.max_capacity = 128 * 4;
  o.score_policy = ScorePolicy::kLfu;
  auto t = make_table<int64_t>(kGpu, o);
  // 50 distinct keys, each repeated a random number of times, shuffled.
  std::vector<int64_t> batch;
  std::map<int64_t, int> copies;
  for (int i = 0; i < 50; ++i) {
    const int64_t key = static_cast<int64_t>(rng.next() >> 2);
    const int c = static_cast<int>(rng.uniform(1, 40));
    copies[key] += c;
    for (int j = 0; j < c; ++j) batch.push_back(key);
  }
  std::shuffle(batch.begin(), batch.end(), rng.engine());
  std::vector<float> ones(batch.size() * o.dim, 1.0f);
  auto k = upload(kGpu, batch);
  auto v = upload(kGpu, ones);
  t->accum_or_assign(batch.size(), k.data(), v.data());
  const auto stored = dump(*t);
  ASSERT_EQ(stored.size(), copies.size());
  for (const auto& [key, c] : copies) {
    const auto& e = stored.at(key);
    EXPECT_EQ(e.score, static_cast<uint64_t>(c));
    for (float x : e.row) EXPECT_EQ(x, static_cast<float>(c));
  }
}

// Empty slots carry digest 0 and a stored key never does: keys whose hash digest is 0 are stored
// with digest 1. Such keys fill a one-bucket table's first slots; if any write stored digest 0
// for them, their slots would look empty and later inserts would overwrite them.
TEST(CudaTable, KeysWithTheEmptyDigestDoNotHideOrLoseSlots) {
  DYNEMB_REQUIRE_CUDA();
  for (const bool grouped : {false, true}) {
    SCOPED_TRACE(grouped ? "grouped writes" : "locked writes");
    TestRng rng;
    TableOptions o;
    o.dim = 4;
    o.bucket_capacity = 128;
    o.init_capacity = o.max_capacity = 128;  // one bucket
    if (grouped) o.grouped_write_min_batch = 0;
    auto t = make_table<uint64_t>(kGpu, o);
    std::set<uint64_t> seen;
    std::vector<uint64_t> look_alikes;
    while (look_alikes.size() < 20) {
      const uint64_t k = rng.next();
      if (k < kFirstReservedKey && digest8_of_hash(hash_key_bits(k)) == table::cuda::kEmptyDigest &&
          seen.insert(k).second)
        look_alikes.push_back(k);
    }
    const std::vector<uint64_t> others = distinct_keys(rng, 60, seen);
    Model model;
    for (const std::vector<uint64_t>* keys :
         std::array<const std::vector<uint64_t>*, 2>{&look_alikes, &others}) {
      insert_rows(*t, model, *keys, rows_for(*keys, o.dim, 0.25f));
    }
    EXPECT_EQ(t->size(), model.size());
    EXPECT_EQ(t->stats().evictions, 0u);
    expect_rows(*t, model);
  }
}

}  // namespace
}  // namespace dynemb::testing

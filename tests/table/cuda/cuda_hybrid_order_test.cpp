// Hybrid tables visit the keys of a large call in bucket order (so that their host-resident rows
// are reached in address order): every op must still put each key's result at its own batch
// position and leave the contents a host model predicts.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/bucket_order.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing {
namespace {

constexpr Backend kGpu = Backend::kCuda;
constexpr uint32_t kDim = 16;
// Batches large enough to take the ordered path.
constexpr size_t kBatch = table::cuda::kHostOrderMinBatch + 3000;

using Model = std::map<uint64_t, std::vector<float>>;

// n rows of `dim` small multiples of 1/8: sums of a few stay exact in float32.
std::vector<float> random_rows(TestRng& rng, size_t n, uint32_t dim = kDim) {
  std::vector<float> v(n * dim);
  for (float& x : v)
    x = static_cast<float>(static_cast<int64_t>(rng.uniform(0, 2000)) - 1000) / 8.0f;
  return v;
}

std::vector<float> row_at(const std::vector<float>& rows, size_t i, uint32_t dim = kDim) {
  return {rows.begin() + i * dim, rows.begin() + (i + 1) * dim};
}

void expect_contents(Table<uint64_t>& t, const Model& model) {
  const auto stored = dump(t);
  ASSERT_EQ(stored.size(), model.size());
  for (const auto& [key, row] : model) {
    const auto it = stored.find(key);
    ASSERT_NE(it, stored.end()) << "key " << key << " lost";
    ASSERT_EQ(it->second.row, row) << "key " << key;
  }
}

// `count` keys of the model (distinct, in random order).
std::vector<uint64_t> some_stored(TestRng& rng, const Model& model, size_t count) {
  std::vector<uint64_t> all;
  for (const auto& [key, row] : model) all.push_back(key);
  for (size_t i = 0; i < count && i < all.size(); ++i)
    std::swap(all[i], all[rng.uniform(i, all.size() - 1)]);
  all.resize(std::min(count, all.size()));
  return all;
}

void shuffle(TestRng& rng, std::vector<uint64_t>& keys) {
  for (size_t i = keys.size(); i > 1; --i) std::swap(keys[i - 1], keys[rng.uniform(0, i - 1)]);
}

// A batch of `stored` keys of the model and `fresh` keys never seen (also returned apart),
// shuffled.
struct MixedBatch {
  std::vector<uint64_t> keys;
  std::vector<uint64_t> fresh;
};

MixedBatch mixed_batch(TestRng& rng, const Model& model, size_t stored, size_t fresh,
                       std::set<uint64_t>& seen) {
  MixedBatch b{some_stored(rng, model, stored), distinct_keys(rng, fresh, seen)};
  b.keys.insert(b.keys.end(), b.fresh.begin(), b.fresh.end());
  shuffle(rng, b.keys);
  return b;
}

// insert_or_assign (or assign) of `rows` under `keys`.
void store(Table<uint64_t>& t, const std::vector<uint64_t>& keys, const std::vector<float>& rows,
           bool assign = false) {
  auto k = upload(kGpu, keys);
  auto v = upload(kGpu, rows);
  if (assign) {
    t.assign(keys.size(), k.data(), v.data());
  } else {
    t.insert_or_assign(keys.size(), k.data(), v.data());
  }
}

// A pointer call's outputs: each key's address and founds flag.
struct Addresses {
  std::vector<float*> rows;
  std::vector<uint8_t> founds;
};

enum class PointerCall { kFind, kFindOrInsert, kFindOrReserve };

// find_pointers, find_or_insert_pointers or find_or_reserve_pointers of `keys`.
Addresses pointers_of(Table<uint64_t>& t, const std::vector<uint64_t>& keys, PointerCall call) {
  auto k = upload(kGpu, keys);
  BackendBuffer<float*> ptrs(kGpu, keys.size());
  BackendBuffer<bool> founds(kGpu, keys.size());
  if (call == PointerCall::kFind) {
    t.find_pointers(keys.size(), k.data(), ptrs.data(), founds.data(), nullptr);
  } else if (call == PointerCall::kFindOrInsert) {
    t.find_or_insert_pointers(keys.size(), k.data(), ptrs.data(), founds.data(), nullptr);
  } else {
    t.find_or_reserve_pointers(keys.size(), k.data(), ptrs.data(), founds.data(), nullptr);
  }
  return Addresses{download(ptrs, keys.size()), download_flags(kGpu, founds, keys.size())};
}

// Every op on batches that take the ordered path, with the writes' keys in flight capped at
// `keys_in_flight` (0: no cap).
void check_large_calls(uint32_t keys_in_flight) {
  TestRng rng;
  TableOptions o;
  o.host_keys_in_flight = keys_in_flight;
  o.dim = kDim;
  o.bucket_capacity = 128;
  o.max_capacity = 128 * 1024;
  o.init_capacity = o.max_capacity / 4;  // the inserts grow it
  o.max_load_factor = 0.75;
  o.score_policy = ScorePolicy::kStep;
  o.safe_check = SafeCheck::kIgnore;
  o.max_hbm_for_values = o.max_capacity / 4 * kDim * sizeof(float);  // 3/4 of the rows on the host
  auto t = make_table<uint64_t>(kGpu, o);
  std::set<uint64_t> seen;
  Model model;

  // insert_or_assign of new keys, twice (the table grows; deferred keys are retried in bucket
  // order too), well under any bucket's capacity: nothing is evicted until insert_and_evict.
  for (int round = 0; round < 2; ++round) {
    const auto keys = distinct_keys(rng, kBatch, seen);
    const auto rows = random_rows(rng, keys.size());
    store(*t, keys, rows);
    for (size_t i = 0; i < keys.size(); ++i) model[keys[i]] = row_at(rows, i);
  }
  ASSERT_GT(t->capacity(), o.init_capacity);
  expect_contents(*t, model);

  // find: stored and unknown keys mixed.
  {
    const auto keys = mixed_batch(rng, model, kBatch - 4000, 4000, seen).keys;
    auto k = upload(kGpu, keys);
    BackendBuffer<float> out(kGpu, keys.size() * kDim);
    BackendBuffer<bool> founds(kGpu, keys.size());
    t->find(keys.size(), k.data(), out.data(), founds.data(), nullptr);
    const auto rows = download(out, keys.size() * kDim);
    const auto f = download_flags(kGpu, founds, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = model.find(keys[i]);
      ASSERT_EQ(f[i] != 0, it != model.end()) << "position " << i;
      if (it != model.end()) ASSERT_EQ(row_at(rows, i), it->second) << "position " << i;
    }
  }

  // assign (stored and unknown keys), then accum_or_assign with every key twice in the batch.
  {
    const auto keys = mixed_batch(rng, model, kBatch / 2, kBatch / 2, seen).keys;
    const auto rows = random_rows(rng, keys.size());
    store(*t, keys, rows, /*assign=*/true);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (auto it = model.find(keys[i]); it != model.end()) it->second = row_at(rows, i);
    }
    std::vector<uint64_t> twice = some_stored(rng, model, kBatch / 4);
    const auto fresh = distinct_keys(rng, kBatch / 4, seen);
    twice.insert(twice.end(), fresh.begin(), fresh.end());
    twice.insert(twice.end(), twice.begin(), twice.end());
    shuffle(rng, twice);
    const auto deltas = random_rows(rng, twice.size());
    auto k2 = upload(kGpu, twice);
    auto v2 = upload(kGpu, deltas);
    t->accum_or_assign(twice.size(), k2.data(), v2.data());
    std::map<uint64_t, std::vector<float>> sums;
    for (size_t i = 0; i < twice.size(); ++i) {
      auto& s = sums[twice[i]];
      if (s.empty()) s.assign(kDim, 0.0f);
      for (uint32_t j = 0; j < kDim; ++j) s[j] += deltas[i * kDim + j];
    }
    for (const auto& [key, sum] : sums) {
      auto& row = model[key];  // a new key: its two copies insert and add, in either order
      if (row.empty()) row.assign(kDim, 0.0f);
      for (uint32_t j = 0; j < kDim; ++j) row[j] += sum[j];
    }
  }
  expect_contents(*t, model);

  // find_or_insert_given (new keys take the offered row) and find_or_insert (new keys take the
  // initializer's row, which a later find must return).
  for (const bool given : {true, false}) {
    const auto keys = mixed_batch(rng, model, kBatch / 2, kBatch / 2, seen).keys;
    const auto offered = random_rows(rng, keys.size());
    auto k = upload(kGpu, keys);
    auto v = upload(kGpu, offered);
    BackendBuffer<bool> founds(kGpu, keys.size());
    if (given) {
      t->find_or_insert_given(keys.size(), k.data(), v.data(), founds.data(), nullptr);
    } else {
      t->find_or_insert(keys.size(), k.data(), v.data(), founds.data(), nullptr);
    }
    const auto rows = download(v, keys.size() * kDim);
    const auto f = download_flags(kGpu, founds, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = model.find(keys[i]);
      ASSERT_EQ(f[i] != 0, it != model.end()) << "position " << i;
      if (it != model.end()) {
        ASSERT_EQ(row_at(rows, i), it->second) << "position " << i;
      } else {
        if (given) ASSERT_EQ(row_at(rows, i), row_at(offered, i)) << "position " << i;
        model[keys[i]] = row_at(rows, i);
      }
    }
    expect_contents(*t, model);
  }

  // find_or_insert_pointers (its lock-free pass in bucket order, the locked pass over its misses):
  // the flags, and the addresses find_pointers gives afterwards; the rows behind them via find.
  {
    const auto keys = mixed_batch(rng, model, kBatch / 2, kBatch / 2, seen).keys;
    const Addresses call = pointers_of(*t, keys, PointerCall::kFindOrInsert);
    const auto& f = call.founds;
    const auto& p = call.rows;
    const auto p2 = pointers_of(*t, keys, PointerCall::kFind).rows;
    auto k = upload(kGpu, keys);
    BackendBuffer<float> out(kGpu, keys.size() * kDim);
    BackendBuffer<bool> founds(kGpu, keys.size());
    t->find(keys.size(), k.data(), out.data(), founds.data(), nullptr);
    const auto rows = download(out, keys.size() * kDim);
    const auto f2 = download_flags(kGpu, founds, keys.size());
    std::set<float*> distinct(p.begin(), p.end());
    ASSERT_EQ(distinct.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = model.find(keys[i]);
      ASSERT_EQ(f[i] != 0, it != model.end()) << "position " << i;
      ASSERT_TRUE(f2[i]) << "position " << i;
      ASSERT_EQ(p[i], p2[i]) << "position " << i;
      if (it != model.end()) {
        ASSERT_EQ(row_at(rows, i), it->second) << "position " << i;
      } else {
        model[keys[i]] = row_at(rows, i);
      }
    }
  }
  expect_contents(*t, model);

  // find_or_reserve_pointers (no rows written, the caller's order): stored keys' addresses are
  // find_pointers' and their rows the model's; the caller then fills the new keys' rows.
  {
    const auto [keys, fresh] = mixed_batch(rng, model, kBatch / 2, kBatch / 2, seen);
    const Addresses call = pointers_of(*t, keys, PointerCall::kFindOrReserve);
    const auto& f = call.founds;
    const auto& p = call.rows;
    const auto p2 = pointers_of(*t, keys, PointerCall::kFind).rows;
    ASSERT_EQ(std::set<float*>(p.begin(), p.end()).size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(f[i] != 0, model.count(keys[i]) != 0) << "position " << i;
      ASSERT_EQ(p[i], p2[i]) << "position " << i;
    }
    const auto rows = random_rows(rng, fresh.size());
    store(*t, fresh, rows, /*assign=*/true);
    for (size_t i = 0; i < fresh.size(); ++i) model[fresh[i]] = row_at(rows, i);
  }
  expect_contents(*t, model);

  // erase, then insert_and_evict past the capacity: every evicted row is the model's.
  {
    const auto gone = some_stored(rng, model, kBatch);
    auto k = upload(kGpu, gone);
    t->erase(gone.size(), k.data());
    for (uint64_t key : gone) model.erase(key);
  }
  expect_contents(*t, model);
  size_t evicted_total = 0;
  for (int round = 0; round < 4; ++round) {
    t->advance_step();
    const auto keys = distinct_keys(rng, 2 * kBatch, seen);
    const auto rows = random_rows(rng, keys.size());
    auto k = upload(kGpu, keys);
    auto v = upload(kGpu, rows);
    BackendBuffer<uint64_t> ek(kGpu, keys.size());
    BackendBuffer<float> ev(kGpu, keys.size() * kDim);
    BackendBuffer<uint64_t> es(kGpu, keys.size());
    const size_t count = t->insert_and_evict(keys.size(), k.data(), v.data(), nullptr, ek.data(),
                                             ev.data(), es.data());
    for (size_t i = 0; i < keys.size(); ++i) model[keys[i]] = row_at(rows, i);
    const auto hk = download(ek, count);
    const auto hv = download(ev, count * kDim);
    for (size_t i = 0; i < count; ++i) {
      const auto it = model.find(hk[i]);
      ASSERT_NE(it, model.end()) << "evicted an unknown key " << hk[i];
      ASSERT_EQ(row_at(hv, i), it->second) << "evicted key " << hk[i];
      model.erase(it);
    }
    evicted_total += count;
  }
  EXPECT_GT(evicted_total, 0u);
  expect_contents(*t, model);
}

TEST(CudaHybridOrder, LargeCallsKeepEveryKeysResultAtItsPosition) {
  DYNEMB_REQUIRE_CUDA();
  check_large_calls(TableOptions{}.host_keys_in_flight);
}

TEST(CudaHybridOrder, LargeCallsWithAnInFlightCap) {
  DYNEMB_REQUIRE_CUDA();
  check_large_calls(8192);
}

// A cap of a few keys: one block an SM.
TEST(CudaHybridOrder, LargeCallsWithOneBlockAnSm) {
  DYNEMB_REQUIRE_CUDA();
  check_large_calls(64);
}

// Rows of 64 floats: an ordered launch writes them on 8-thread tiles (insert_or_assign, assign
// and find_or_insert_pointers take 4-thread tiles at this width elsewhere). Contents against a
// host model after each call.
TEST(CudaHybridOrder, WideRowsOnEightThreadTiles) {
  DYNEMB_REQUIRE_CUDA();
  constexpr uint32_t kWide = 64;
  TestRng rng;
  TableOptions o;
  o.dim = kWide;
  o.bucket_capacity = 128;
  o.max_capacity = o.init_capacity = 128 * 512;
  o.max_load_factor = 1.0;
  o.score_policy = ScorePolicy::kStep;
  o.safe_check = SafeCheck::kIgnore;
  o.max_hbm_for_values = o.max_capacity / 4 * kWide * sizeof(float);  // 3/4 on the host
  auto t = make_table<uint64_t>(kGpu, o);
  std::set<uint64_t> seen;
  Model model;
  // insert_or_assign of new keys.
  {
    const auto keys = distinct_keys(rng, kBatch, seen);
    const auto rows = random_rows(rng, keys.size(), kWide);
    store(*t, keys, rows);
    for (size_t i = 0; i < keys.size(); ++i) model[keys[i]] = row_at(rows, i, kWide);
  }
  expect_contents(*t, model);
  // assign: stored and unknown keys.
  {
    const auto keys = mixed_batch(rng, model, kBatch / 2, kBatch / 2, seen).keys;
    const auto rows = random_rows(rng, keys.size(), kWide);
    store(*t, keys, rows, /*assign=*/true);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (auto it = model.find(keys[i]); it != model.end()) it->second = row_at(rows, i, kWide);
    }
  }
  expect_contents(*t, model);
  // find_or_insert_pointers: stored and new keys; every address distinct, the flags the model's,
  // a stored key's row behind its address unchanged, a new key's row the initializer's.
  {
    const auto keys = mixed_batch(rng, model, kBatch / 2, kBatch / 2, seen).keys;
    const Addresses call = pointers_of(*t, keys, PointerCall::kFindOrInsert);
    const auto& f = call.founds;
    const auto& p = call.rows;
    ASSERT_EQ(std::set<float*>(p.begin(), p.end()).size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = model.find(keys[i]);
      ASSERT_EQ(f[i] != 0, it != model.end()) << "position " << i;
      std::vector<float> row(kWide);
      ASSERT_EQ(cudaMemcpy(row.data(), p[i], kWide * sizeof(float), cudaMemcpyDefault),
                cudaSuccess);
      if (it != model.end()) {
        ASSERT_EQ(row, it->second) << "position " << i;
      } else {
        std::vector<float> initial(kWide);
        fill_initial_row(o.initializer, keys[i], initial.data(), kWide);
        ASSERT_EQ(row, initial) << "position " << i;
        model[keys[i]] = row;
      }
    }
  }
  expect_contents(*t, model);
}

}  // namespace
}  // namespace dynemb::testing

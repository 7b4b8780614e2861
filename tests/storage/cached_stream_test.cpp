// "Nothing lost": many distinct keys stream through a fast tier of 1% of the rows over every
// Storage; afterwards every key is in exactly one tier (or was dropped by a bounded last tier and
// counted) and every row equals the reference. Also: a failing lower tier, Redis killed and
// restarted, checkpoints of a caching table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/checkpoint/checkpoint.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/storage/cached_table.hpp"
#include "storage/storage_kinds.hpp"

namespace dynemb::testing {
namespace {

using storage::CachedTable;
using storage::CachingStats;
using K = int64_t;

constexpr uint32_t kDim = 4;

TableOptions stream_fast_options(uint64_t slots) {
  TableOptions o;
  o.dim = kDim;
  o.init_capacity = slots;
  o.max_capacity = slots;
  o.max_load_factor = 1.0;
  o.score_policy = ScorePolicy::kStep;
  o.initializer.kind = InitializerKind::kUniform;
  o.initializer.seed = 77;
  return o;
}

// The reference: every key's row as one big table would hold it.
class Reference {
 public:
  explicit Reference(const TableOptions& o) : init_(o.initializer) {}

  // The row find_or_insert returns for `key` (creating it as the initializer would).
  const std::vector<float>& touch(K key) {
    auto [it, fresh] = rows_.try_emplace(key);
    if (fresh) {
      it->second.resize(kDim);
      for (uint32_t c = 0; c < kDim; ++c) it->second[c] = initial_value(init_, key_bits(key), c);
    }
    return it->second;
  }
  void add(K key, const float* delta) {
    std::vector<float>& row = rows_.at((touch(key), key));
    for (uint32_t c = 0; c < kDim; ++c) row[c] += delta[c];
  }
  const std::unordered_map<K, std::vector<float>>& rows() const { return rows_; }

 private:
  InitializerOptions init_;
  std::unordered_map<K, std::vector<float>> rows_;
};

// Streams `batches` batches: `fresh` new keys each and `revisit` keys seen before; each batch is
// a find_or_insert (rows checked) and an accum_or_assign of a key-dependent delta.
class Streamer {
 public:
  Streamer(CachedTable<K>& table, Reference& ref, uint64_t seed)
      : t_(table), ref_(ref), rng_(seed) {}

  // One batch; throws what the table throws (the batch may be sent again with retry()).
  void next(size_t fresh, size_t revisit) {
    keys_.clear();
    for (size_t i = 0; i < fresh; ++i) keys_.push_back(static_cast<K>(next_key_++ * 7919 + 3));
    for (size_t i = 0; i < revisit && next_key_ > fresh; ++i)
      keys_.push_back(static_cast<K>((rng_() % (next_key_ - fresh)) * 7919 + 3));
    retry();
  }
  // Sends the last batch again (after a failure).
  void retry() {
    const size_t n = keys_.size();
    std::vector<float> out(n * kDim);
    t_.find_or_insert(n, keys_.data(), out.data(), nullptr);
    std::vector<float> delta(n * kDim);
    for (size_t i = 0; i < n; ++i) {
      const std::vector<float>& want = ref_.touch(keys_[i]);
      for (uint32_t c = 0; c < kDim; ++c)
        ASSERT_EQ(out[i * kDim + c], want[c]) << "key " << keys_[i];
      for (uint32_t c = 0; c < kDim; ++c)
        delta[i * kDim + c] = static_cast<float>((keys_[i] + c) % 17) / 16.0f;
    }
    // Repeated keys in a batch: accum adds every copy, as the reference does.
    t_.accum_or_assign(n, keys_.data(), delta.data());
    for (size_t i = 0; i < n; ++i) ref_.add(keys_[i], &delta[i * kDim]);
    t_.advance_step();
  }
  uint64_t keys_made() const { return next_key_; }

 private:
  CachedTable<K>& t_;
  Reference& ref_;
  std::mt19937_64 rng_;
  uint64_t next_key_ = 0;
  std::vector<K> keys_;
};

// Every reference key: in exactly one tier, its row equal to the reference's. Returns the rows
// found in each tier (fast, below).
// With `flushed`, a fast row may also have its (clean) copy below.
std::pair<size_t, size_t> expect_nothing_lost(CachedTable<K>& t, const Reference& ref,
                                              bool allow_dropped = false, bool flushed = false) {
  std::vector<K> keys;
  for (const auto& [k, row] : ref.rows()) keys.push_back(k);
  const size_t n = keys.size();
  std::unique_ptr<bool[]> in_fast(new bool[n]), below(new bool[n]), found(new bool[n]);
  t.fast_table().contains(n, keys.data(), in_fast.get());
  std::vector<uint64_t> bits(keys.begin(), keys.end()), scores(n);
  std::vector<float> rows(n * kDim), got(n * kDim);
  t.lower().find(n, bits.data(), rows.data(), scores.data(), below.get());
  t.find(n, keys.data(), got.data(), found.get(), nullptr);
  size_t fast = 0, low = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!flushed) EXPECT_FALSE(in_fast[i] && below[i]) << "key " << keys[i] << " in both tiers";
    fast += in_fast[i];
    low += below[i];
    if (!found[i]) {
      EXPECT_TRUE(allow_dropped) << "key " << keys[i] << " lost";
      continue;
    }
    const std::vector<float>& want = ref.rows().at(keys[i]);
    for (uint32_t c = 0; c < kDim; ++c) {
      EXPECT_EQ(got[i * kDim + c], want[c]) << "key " << keys[i];
      if (got[i * kDim + c] != want[c]) return {fast, low};
    }
  }
  return {fast, low};
}

template <class Kind>
class CachedStream : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kind_.skip_reason(); !why.empty()) GTEST_SKIP() << why;
  }
  Kind kind_;
};

using Kinds = ::testing::Types<HostKind, RocksDbKind, RedisKind, MapKind>;
TYPED_TEST_SUITE(CachedStream, Kinds, KindName);

// 100K distinct keys (plus revisits) through a fast tier of 1024 slots (1%).
TYPED_TEST(CachedStream, NothingLostThroughAOnePercentFastTier) {
  TestRng rng;
  const TableOptions fo = stream_fast_options(1024);
  CachedTable<K> t(Backend::kCpu, fo, this->kind_.make(kDim));
  Reference ref(fo);
  Streamer s(t, ref, rng.next());
  for (int b = 0; b < 200; ++b) {
    s.next(500, 60);
    if (::testing::Test::HasFatalFailure()) return;
  }
  const uint64_t distinct = s.keys_made();
  ASSERT_EQ(ref.rows().size(), distinct);
  const CachingStats st = t.caching_stats();
  const auto [fast, below] = expect_nothing_lost(t, ref);
  EXPECT_EQ(fast + below, distinct);
  EXPECT_LE(fast, 1024u);
  EXPECT_EQ(t.size(), distinct);
  std::cout << "[  STATS   ] " << t.lower().describe() << ": keys " << distinct << ", hits "
            << st.hits << ", misses " << st.misses << ", lower hits " << st.lower_hits
            << ", rows up " << st.rows_up << ", rows down " << st.rows_down
            << ", evictions written " << st.evictions_written << ", lower wait "
            << st.lower_wait_ns / 1000000 << " ms" << std::endl;
  EXPECT_GE(st.evictions_written, distinct - 1024);
  EXPECT_GT(st.lower_hits, 0u);
  EXPECT_EQ(st.rows_up, st.lower_hits);  // every row read from below moved up
  EXPECT_EQ(st.new_rows, distinct);
  EXPECT_EQ(st.lower_failures, 0u);
  EXPECT_EQ(st.pending_rows, 0u);
  EXPECT_GT(st.bytes_down, st.rows_down * kDim * sizeof(float));
  // flush: every fast row also below; the table's contents and size unchanged.
  t.flush();
  EXPECT_EQ(t.size(), distinct);
  EXPECT_EQ(t.lower().size(), distinct);
  expect_nothing_lost(t, ref, false, /*flushed=*/true);
}

TEST(CachedStreamHost, BoundedLastTierDropsOnlyWhatItCounts) {
  TestRng rng;
  const TableOptions fo = stream_fast_options(1024);
  HostKind kind;
  auto lower = kind.make(kDim, 20000);  // the last tier holds 20K of 50K rows
  CachedTable<K> t(Backend::kCpu, fo, lower);
  Reference ref(fo);
  Streamer s(t, ref, rng.next());
  for (int b = 0; b < 100; ++b) s.next(500, 0);
  const auto [fast, below] = expect_nothing_lost(t, ref, /*allow_dropped=*/true);
  const uint64_t dropped = lower->stats().evicted;
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(fast + below + dropped, s.keys_made());
  EXPECT_EQ(t.stats().evictions, dropped);
}

TEST(CachedStreamFaults, FailingLowerTierLosesNothingAndRecovers) {
  TestRng rng;
  const TableOptions fo = stream_fast_options(1024);
  auto lower = std::make_shared<MapStorage>(kDim);
  CachedTable<K> t(Backend::kCpu, fo, lower);
  Reference ref(fo);
  Streamer s(t, ref, rng.next());
  for (int b = 0; b < 20; ++b) s.next(500, 60);
  // The lower tier is down for one call: the read of the misses fails, nothing changes.
  const size_t fast_before = t.fast_table().size();
  lower->fail_calls(1);
  EXPECT_THROW(s.next(500, 60), storage::StorageError);
  EXPECT_EQ(t.fast_table().size(), fast_before);
  EXPECT_EQ(t.caching_stats().pending_rows, 0u);
  s.retry();
  // Writes fail (disk full) three times: the evicted rows wait in host memory, reads see them,
  // and calls that write throw until the tier takes them.
  lower->fail_writes(3);
  EXPECT_THROW(s.next(500, 60), storage::StorageError);
  const CachingStats st = t.caching_stats();
  EXPECT_GT(st.pending_rows, 0u);
  EXPECT_GE(st.lower_failures, 2u);
  // Served from the fast tier and the pending rows (rows moved up still have their old copy
  // below until the pending erase goes down).
  expect_nothing_lost(t, ref, false, /*flushed=*/true);
  // (The failing call tried twice: its own write, then the pending rows.)
  EXPECT_THROW(s.retry(), storage::StorageError);
  EXPECT_EQ(lower->stats().failures, 4u);  // one read, three writes
  s.retry();                               // the tier is back: the pending rows go down first
  EXPECT_EQ(t.caching_stats().pending_rows, 0u);
  for (int b = 0; b < 10; ++b) s.next(500, 60);
  const auto [fast, below] = expect_nothing_lost(t, ref);
  EXPECT_EQ(fast + below, s.keys_made());
}

TEST(CachedStreamRedis, ServerKilledAndRestartedMidStream) {
#ifndef DYNEMB_WITH_REDIS
  GTEST_SKIP() << "built without hiredis (libhiredis-dev)";
#endif
  if (!redis_server_installed()) GTEST_SKIP() << "redis-server is not installed";
  StorageTempDir dir;
  RedisServer server(dir.path().string());  // an fsync'd append-only file: restarts keep rows
  storage::RedisStorageOptions ro;
  ro.servers = {server.address()};
  ro.row_dim = kDim;
  ro.timeout_ms = 1000;
  auto lower = std::make_shared<storage::RedisStorage>(ro);
  TestRng rng;
  const TableOptions fo = stream_fast_options(1024);
  CachedTable<K> t(Backend::kCpu, fo, lower);
  Reference ref(fo);
  Streamer s(t, ref, rng.next());
  for (int b = 0; b < 40; ++b) s.next(500, 60);
  // A dropped connection is reconnected without an error.
  ASSERT_EQ(std::system(("redis-cli -p " + std::to_string(server.port()) +
                         " CLIENT KILL TYPE normal > /dev/null")
                            .c_str()),
            0);
  s.next(500, 60);
  // The server is gone: the batch fails as a whole, naming the server.
  server.kill();
  try {
    s.next(500, 60);
    ADD_FAILURE() << "a batch succeeded with the server down";
  } catch (const storage::StorageError& e) {
    EXPECT_NE(std::string(e.what()).find(server.address()), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.retry(), storage::StorageError);
  server.start();
  s.retry();
  for (int b = 0; b < 40; ++b) s.next(500, 60);
  const auto [fast, below] = expect_nothing_lost(t, ref);
  EXPECT_EQ(fast + below, s.keys_made());
  EXPECT_GT(t.caching_stats().lower_failures, 0u);
}

// Rows written or moved while a prefetch_async reads them are not moved up stale.
TEST(CachedPrefetch, RowsChangedDuringTheReadAreNotMovedUpStale) {
  const TableOptions fo = stream_fast_options(1024);
  auto lower = std::make_shared<MapStorage>(kDim);
  CachedTable<K> t(Backend::kCpu, fo, lower);
  auto fill = [&](K first, size_t n, float value) {
    std::vector<K> keys(n);
    std::vector<float> rows(n * kDim, value);
    for (size_t i = 0; i < n; ++i) keys[i] = first + static_cast<K>(i);
    t.insert_or_assign(n, keys.data(), rows.data());
    t.advance_step();
  };
  for (K k = 0; k < 5000; k += 500) fill(k, 500, 1.0f);  // keys 0..4999, most of them below
  std::vector<K> a(500);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<K>(i);
  lower->delay_reads(300);
  t.prefetch_async(a.size(), a.data());  // reads 1.0 rows for 300 ms
  lower->delay_reads(0);
  fill(0, 500, 2.0f);                                       // meanwhile: new rows for the same keys
  for (K k = 5000; k < 8000; k += 500) fill(k, 500, 3.0f);  // which then go down again
  t.erase(50, a.data());
  t.wait_prefetch();
  std::vector<float> got(a.size() * kDim, -1.0f);
  std::unique_ptr<bool[]> found(new bool[a.size()]);
  t.find(a.size(), a.data(), got.data(), found.get(), nullptr);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(found[i], i >= 50) << "key " << a[i];
    if (found[i]) ASSERT_EQ(got[i * kDim], 2.0f) << "key " << a[i] << " came back stale";
  }
  std::vector<K> all(8000);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<K>(i);
  std::unique_ptr<bool[]> in_fast(new bool[all.size()]), below(new bool[all.size()]);
  t.fast_table().contains(all.size(), all.data(), in_fast.get());
  std::vector<uint64_t> bits(all.begin(), all.end()), scores(all.size());
  std::vector<float> rows(all.size() * kDim);
  lower->find(all.size(), bits.data(), rows.data(), scores.data(), below.get());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_FALSE(in_fast[i] && below[i]) << "key " << i;
  EXPECT_EQ(t.size(), 8000u - 50u);
}

// Dump through the checkpoint API: both tiers are written; the checkpoint loads into one big
// table and into another caching table with the same rows. A delta covers both tiers too.
TEST(CachedCheckpoint, DumpCoversEveryTierAndLoadsAnywhere) {
  TestRng rng;
  TableOptions fo = stream_fast_options(1024);
  fo.score_policy = ScorePolicy::kStep;
  CachedTable<K> t(Backend::kCpu, fo, std::make_shared<MapStorage>(kDim));
  Reference ref(fo);
  Streamer s(t, ref, rng.next());
  for (int b = 0; b < 20; ++b) s.next(500, 60);
  const uint64_t step = t.score();
  for (int b = 0; b < 3; ++b) s.next(500, 60);  // rows touched from `step` on
  StorageTempDir dir;
  const auto path = dir.path() / "ckpt";
  const checkpoint::DumpReport report = checkpoint::dump(path, {checkpoint::named("t", t)});
  EXPECT_EQ(report.rows, s.keys_made());
  TableOptions big = fo;
  big.init_capacity = big.max_capacity = 1 << 16;
  big.max_load_factor = 0.5;
  auto plain = make_table<K>(Backend::kCpu, big);
  checkpoint::load(path, {checkpoint::named("t", *plain)});
  CachedTable<K> again(Backend::kCpu, fo, std::make_shared<MapStorage>(kDim));
  checkpoint::load(path, {checkpoint::named("t", again)});
  std::vector<K> keys;
  for (const auto& [k, row] : ref.rows()) keys.push_back(k);
  const size_t n = keys.size();
  std::vector<float> a(n * kDim), b(n * kDim);
  std::unique_ptr<bool[]> fa(new bool[n]), fb(new bool[n]);
  plain->find(n, keys.data(), a.data(), fa.get(), nullptr);
  again.find(n, keys.data(), b.data(), fb.get(), nullptr);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(fa[i] && fb[i]) << "key " << keys[i];
    for (uint32_t c = 0; c < kDim; ++c) {
      ASSERT_EQ(a[i * kDim + c], ref.rows().at(keys[i])[c]);
      ASSERT_EQ(b[i * kDim + c], ref.rows().at(keys[i])[c]);
    }
  }
  // The delta since `step`: exactly the rows whose score is >= step, from both tiers.
  const checkpoint::DeltaRows<K> delta = checkpoint::incremental_dump<K>(t, step);
  size_t want = 0;
  t.for_each([&](K, std::span<const float>, uint64_t score) { want += score >= step; });
  EXPECT_EQ(delta.keys.size(), want);
  EXPECT_GT(want, 1024u);  // more than the fast tier holds: rows below were included
}

}  // namespace
}  // namespace dynemb::testing

// The CUDA table's eviction through score bounds (src/table/cuda/victim.cuh): at max capacity
// with TIMESTAMP scores, every insert_and_evict must evict exactly the lowest (score, key) entries
// of each bucket it writes to, read back from the table before the call. The sequence mixes the
// calls that leave bounds stale (updates that raise a bucket's lowest score, erases), caller
// scores (which turn the bounds off) and clear (which turns them on again).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "core/test_random.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/table/table.hpp"
#include "table/cuda/cuda_test_util.hpp"

namespace dynemb::testing {
namespace {

constexpr Backend kGpu = Backend::kCuda;
// Row widths whose locked writes run on 4-thread and on 8-thread tiles (write_kernels.cu).
constexpr uint32_t kNarrowDim = 4;
constexpr uint32_t kWideDim = 96;
constexpr uint32_t kBucketSlots = 128;

using Entry = std::pair<uint64_t, uint64_t>;  // (score, key): the victim order

uint64_t bucket_of(uint64_t key, uint64_t buckets) {
  return bucket_of_hash(hash_key_bits(key), buckets);
}

class ScoreBoundsRun {
 public:
  ScoreBoundsRun(uint64_t buckets, bool grouped, uint32_t dim = kNarrowDim)
      : buckets_(buckets), dim_(dim) {
    TableOptions o;
    o.dim = dim;
    o.bucket_capacity = kBucketSlots;
    o.init_capacity = o.max_capacity = kBucketSlots * buckets;
    o.score_policy = ScorePolicy::kTimestamp;
    if (grouped) o.grouped_write_min_batch = 0;
    table_ = make_table<uint64_t>(kGpu, o);
  }

  // Inserts fresh keys until every slot is taken (full buckets evict meanwhile).
  void fill() {
    while (table_->size() < capacity()) insert_and_check(fresh(64 * buckets_));
  }

  // insert_and_evict of `keys` (not stored): checks the evicted entries against the lowest
  // (score, key) entries of each bucket before the call, beyond the bucket's free slots.
  void insert_and_check(const std::vector<uint64_t>& keys) {
    const auto before = entries_by_bucket();
    std::map<uint64_t, size_t> arriving;
    for (uint64_t k : keys) ++arriving[bucket_of(k, buckets_)];
    std::map<uint64_t, uint64_t> expected;  // key -> score
    for (const auto& [bucket, count] : arriving) {
      auto it = before.find(bucket);
      const std::vector<Entry> none;
      const std::vector<Entry>& stored = it == before.end() ? none : it->second;
      const size_t free = kBucketSlots - stored.size();
      for (size_t e = 0; e + free < count && e < stored.size(); ++e)
        expected[stored[e].second] = stored[e].first;
    }
    std::vector<float> rows(keys.size() * dim_, 0.5f);
    auto k = upload(kGpu, keys);
    auto v = upload(kGpu, rows);
    BackendBuffer<uint64_t> out_keys(kGpu, keys.size());
    BackendBuffer<float> out_rows(kGpu, keys.size() * dim_);
    BackendBuffer<uint64_t> out_scores(kGpu, keys.size());
    const size_t evicted =
        table_->insert_and_evict(keys.size(), k.data(), v.data(), nullptr, out_keys.data(),
                                 out_rows.data(), out_scores.data());
    const auto got_keys = download(out_keys, evicted);
    const auto got_scores = download(out_scores, evicted);
    std::map<uint64_t, uint64_t> got;
    for (size_t i = 0; i < evicted; ++i) got[got_keys[i]] = got_scores[i];
    ASSERT_EQ(got, expected) << "call " << calls_ << ", " << keys.size() << " keys";
    ++calls_;
  }

  // Raises the scores of `n` stored keys (insert_or_assign of present keys, timer scores).
  void update(size_t n) { rewrite(pick_stored(n), nullptr); }

  // Raises the scores of the table's `n` lowest (score, key) entries.
  void update_lowest(size_t n) {
    std::vector<Entry> entries;
    for (const auto& [bucket, stored] : entries_by_bucket())
      entries.insert(entries.end(), stored.begin(), stored.end());
    std::sort(entries.begin(), entries.end());
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < n && i < entries.size(); ++i) keys.push_back(entries[i].second);
    rewrite(keys, nullptr);
  }

  // Gives `n` stored keys low caller scores (the table stops relying on its bounds).
  void caller_scores(size_t n) {
    const auto keys = pick_stored(n);
    std::vector<uint64_t> scores(keys.size());
    for (uint64_t& s : scores) s = rng_.uniform(1, 1'000'000);
    rewrite(keys, &scores);
  }

  // Erases `n` stored keys.
  void erase(size_t n) {
    const auto keys = pick_stored(n);
    auto k = upload(kGpu, keys);
    table_->erase(keys.size(), k.data());
  }

  void clear() { table_->clear(); }

  std::vector<uint64_t> fresh(size_t n) { return distinct_keys(rng_, n, seen_); }

  uint64_t capacity() const { return kBucketSlots * buckets_; }
  TestRng& rng() { return rng_; }

 private:
  // Each bucket's stored entries, lowest (score, key) first.
  std::map<uint64_t, std::vector<Entry>> entries_by_bucket() {
    std::map<uint64_t, std::vector<Entry>> out;
    for (const auto& [key, stored] : dump(*table_))
      out[bucket_of(key, buckets_)].emplace_back(stored.score, key);
    for (auto& [bucket, entries] : out) std::sort(entries.begin(), entries.end());
    return out;
  }

  std::vector<uint64_t> pick_stored(size_t n) {
    std::vector<uint64_t> stored;
    for (const auto& [key, row] : dump(*table_)) stored.push_back(key);
    std::shuffle(stored.begin(), stored.end(), rng_.engine());
    stored.resize(std::min(n, stored.size()));
    return stored;
  }

  void rewrite(const std::vector<uint64_t>& keys, const std::vector<uint64_t>* scores) {
    std::vector<float> rows(keys.size() * dim_, 1.5f);
    auto k = upload(kGpu, keys);
    auto v = upload(kGpu, rows);
    if (scores != nullptr) {
      auto s = upload(kGpu, *scores);
      table_->insert_or_assign(keys.size(), k.data(), v.data(), s.data());
    } else {
      table_->insert_or_assign(keys.size(), k.data(), v.data());
    }
  }

  uint64_t buckets_;
  uint32_t dim_;
  TestRng rng_;
  std::set<uint64_t> seen_;
  std::unique_ptr<Table<uint64_t>> table_;
  size_t calls_ = 0;
};

void run_mixed_sequence(uint64_t buckets, bool grouped, uint32_t dim = kNarrowDim) {
  ScoreBoundsRun run(buckets, grouped, dim);
  run.fill();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  for (int round = 0; round < 120; ++round) {
    const uint64_t action = run.rng().uniform(0, 99);
    if (action < 55) {
      run.insert_and_check(run.fresh(run.rng().uniform(1, 8 * buckets)));
    } else if (action < 80) {
      run.update(run.rng().uniform(1, 16 * buckets));
    } else if (action < 92) {
      run.erase(run.rng().uniform(1, 8 * buckets));
    } else if (action < 96) {
      run.caller_scores(run.rng().uniform(1, 8 * buckets));
    } else {
      run.clear();
      run.fill();
    }
    ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "round " << round;
  }
}

TEST(CudaScoreBounds, EvictionsTakeEachBucketsLowestScoresOneBucket) {
  DYNEMB_REQUIRE_CUDA();
  run_mixed_sequence(1, false);
}

TEST(CudaScoreBounds, EvictionsTakeEachBucketsLowestScoresManyBuckets) {
  DYNEMB_REQUIRE_CUDA();
  run_mixed_sequence(16, false);
}

TEST(CudaScoreBounds, EvictionsTakeEachBucketsLowestScoresWideRows) {
  DYNEMB_REQUIRE_CUDA();
  run_mixed_sequence(16, false, kWideDim);
}

TEST(CudaScoreBounds, EvictionsTakeEachBucketsLowestScoresGroupedWrites) {
  DYNEMB_REQUIRE_CUDA();
  run_mixed_sequence(16, true);
}

// Updates that raise the lowest score of one group after another: each search then finds the
// group's bound stale and must read on until no bound is below the lowest score found.
TEST(CudaScoreBounds, StaleBoundsAfterUpdatesOfTheLowestScores) {
  DYNEMB_REQUIRE_CUDA();
  ScoreBoundsRun run(1, false);
  run.fill();
  for (int round = 0; round < 40; ++round) {
    // The 16 lowest entries (likely spread over several groups) get fresh timer scores.
    run.update_lowest(16);
    run.insert_and_check(run.fresh(run.rng().uniform(1, 4)));
    ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "round " << round;
  }
}

}  // namespace
}  // namespace dynemb::testing

// The CUDA query's paths against the set of stored keys: every kernel shape (ways 32 / 64 / 128,
// rows staged as float4s, as floats or not staged) at every size class, queries launched as the
// cache's per-stream graphs against kernel launches, a query captured into a CUDA graph and
// replayed, and queries on more streams than the cache keeps scratch for.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_harness.hpp"
#include "core/test_random.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb::cache::testing {
namespace {

using dynemb::testing::TestRng;

void cuda_ok(cudaError_t status) {
  ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
}

// What a query of `keys` must return when exactly `present` is stored (values start at -7).
QueryOutput<int64_t> expected(const std::vector<int64_t>& keys, const std::set<int64_t>& present,
                              uint32_t dim) {
  QueryOutput<int64_t> want;
  want.values.assign(keys.size() * dim, -7.0f);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (present.count(keys[i]) == 0) {
      want.missing_keys.push_back(keys[i]);
      want.missing_positions.push_back(i);
    } else {
      const std::vector<float> row = row_of(keys[i], dim);
      std::copy(row.begin(), row.end(), want.values.begin() + i * dim);
    }
  }
  return want;
}

// The misses of a query as (position, key), by position: what an unordered list must hold.
std::vector<std::pair<uint64_t, int64_t>> by_position(const QueryOutput<int64_t>& q) {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (size_t i = 0; i < q.missing_keys.size(); ++i) {
    out.emplace_back(q.missing_positions[i], q.missing_keys[i]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A query's answer against the expected one: its misses in batch order (`ordered`) or compared
// by position, and its rows. Fatal failures (call under ASSERT_NO_FATAL_FAILURE).
void assert_answer(const QueryOutput<int64_t>& got, const QueryOutput<int64_t>& want,
                   bool ordered) {
  if (ordered) {
    ASSERT_EQ(got.missing_keys, want.missing_keys);
    ASSERT_EQ(got.missing_positions, want.missing_positions);
  } else {
    ASSERT_EQ(by_position(got), by_position(want));
  }
  ASSERT_EQ(got.values, want.values);
}

// The hit and miss counters after queries of `queried` keys, `missed` of them missing.
void expect_counted(const EmbeddingCache<int64_t>& cache, uint64_t queried, uint64_t missed) {
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, missed);
  EXPECT_EQ(stats.hits, queried - missed);
}

// A test cache's options: rows of `dim`, `capacity_rows`, misses listed in batch order or in any
// order, and keys not validated (a batch's sentinel is skipped and counted; a query being
// captured could not synchronize for the check).
CacheOptions<int64_t> query_options(uint32_t dim, uint64_t capacity_rows, bool ordered) {
  CacheOptions<int64_t> options;
  options.dim = dim;
  options.capacity_rows = capacity_rows;
  options.misses_in_batch_order = ordered;
  options.validate_keys = false;
  return options;
}

// Draws n keys from `pool` (repeats included) with a sentinel key at a random position.
std::vector<int64_t> batch_of(TestRng& rng, const std::vector<int64_t>& pool, size_t n,
                              int64_t sentinel) {
  std::vector<int64_t> keys(n);
  for (int64_t& k : keys) k = pool[rng.uniform(0, pool.size() - 1)];
  keys[rng.uniform(0, n - 1)] = sentinel;
  return keys;
}

TEST(CacheCudaQueryPaths, EveryShapeAndSizeAnswersInBatchOrder) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  TestRng rng;
  // Rows staged as float4s (dims 4, 128; 300: up to 8 a lane, one key at a time), as floats
  // (7, 37: dims not a multiple of 4) or not staged (1100).
  // Misses listed in batch order, and in any order (then compared by position).
  for (const bool ordered : {true, false}) {
    for (const uint32_t ways : {32u, 64u, 128u}) {
      for (const uint32_t dim : {4u, 7u, 37u, 128u, 300u, 1100u}) {
        SCOPED_TRACE("ways " + std::to_string(ways) + ", dim " + std::to_string(dim) +
                     (ordered ? "" : ", misses in any order"));
        CacheOptions<int64_t> options = query_options(dim, 12000, ordered);
        options.ways = ways;
        CacheHarness<int64_t> cache(Backend::kCuda, options);
        const std::vector<int64_t> pool = distinct_keys(rng, 16000);
        const std::vector<int64_t> stored(pool.begin(), pool.begin() + 10000);
        ASSERT_EQ(cache.preload(stored, rows_of(stored, dim)), 0u);
        const std::set<int64_t> present(stored.begin(), stored.end());
        uint64_t queried = 0, missed = 0;
        // Up to 131,072 keys: the fused query (tiles of at most 32 keys list their misses with
        // one warp: 1 to 12001 keys on an H100; tiles over 32 keys, 40001 keys on up to 156 SMs,
        // with the whole block); beyond: the query and a separate compaction.
        std::vector<size_t> sizes = {1, 9, 2048, 12001, 40001};
        if (dim <= 128) sizes.push_back(140000);
        // Each size twice: keys drawn from the whole pool, and from 40 of its keys (30 stored, 10
        // not), so that a window of 32 positions holds many copies of a key.
        const std::vector<int64_t> hot(pool.begin() + 9970, pool.begin() + 10010);
        for (const size_t n : sizes) {
          for (const std::vector<int64_t>* from : {&pool, &hot}) {
            SCOPED_TRACE("batch of " + std::to_string(n) + (from == &hot ? " hot keys" : ""));
            const std::vector<int64_t> keys = batch_of(rng, *from, n, options.empty_key);
            const QueryOutput<int64_t> got = cache.query(keys);
            const QueryOutput<int64_t> want = expected(keys, present, dim);
            ASSERT_NO_FATAL_FAILURE(assert_answer(got, want, ordered));
            queried += n;
            missed += want.missing_keys.size();
          }
        }
        expect_counted(cache.cache(), queried, missed);
        EXPECT_EQ(cache.cache().stats().sentinel_keys, 2 * sizes.size());
      }
    }
  }
}

// The benchmark's warm-up on a cache four times the key set: batches of up to 131,072 distinct
// keys (one fused launch, misses listed in any order) overlapping earlier batches, each queried,
// then its misses replaced. Every key is stored once, none is evicted, and all hit afterwards.
TEST(CacheCudaQueryPaths, UnorderedMissListsFillALargeCacheWithoutLoss) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  TestRng rng;
  for (const uint32_t dim : {32u, 128u}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const CacheOptions<int64_t> options = query_options(dim, 1200000, /*ordered=*/false);
    CacheHarness<int64_t> cache(Backend::kCuda, options);
    const std::vector<int64_t> pool = distinct_keys(rng, 300000);
    std::set<int64_t> stored;
    for (int b = 0; b < 8; ++b) {
      SCOPED_TRACE("batch " + std::to_string(b));
      // Distinct keys, a third of them from the 20,000 first of the pool (mostly stored by then).
      std::set<int64_t> drawn;
      const size_t want = rng.uniform(60000, 131072);
      while (drawn.size() < want) {
        drawn.insert(pool[rng.chance(0.33) ? rng.uniform(0, 19999) : rng.uniform(0, 299999)]);
      }
      std::vector<int64_t> keys(drawn.begin(), drawn.end());
      std::shuffle(keys.begin(), keys.end(), rng.engine());
      const QueryOutput<int64_t> got = cache.query(keys);
      ASSERT_EQ(by_position(got), by_position(expected(keys, stored, dim)));
      cache.replace(got.missing_keys, rows_of(got.missing_keys, dim));
      stored.insert(got.missing_keys.begin(), got.missing_keys.end());
    }
    EXPECT_EQ(cache.cache().stats().evicted, 0u);
    EXPECT_EQ(cache.cache().size(), stored.size());
    const std::vector<int64_t> all(stored.begin(), stored.end());
    for (size_t first = 0; first < all.size(); first += 100000) {
      const std::vector<int64_t> part(all.begin() + first,
                                      all.begin() + std::min(all.size(), first + 100000));
      const QueryOutput<int64_t> again = cache.query(part);
      ASSERT_TRUE(again.missing_keys.empty()) << again.missing_keys.size() << " stored keys missed";
      ASSERT_EQ(again.values, rows_of(part, dim));
    }
  }
}

TEST(CacheCudaQueryPaths, CapturedQueryReplaysAgainstTheCurrentContents) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  TestRng rng;
  constexpr uint32_t kDim = 8;
  const CacheOptions<int64_t> options = query_options(kDim, 12000, /*ordered=*/true);
  CacheHarness<int64_t> harness(Backend::kCuda, options);
  EmbeddingCache<int64_t>& cache = harness.cache();
  const std::vector<int64_t> pool = distinct_keys(rng, 6000);
  std::vector<int64_t> stored(pool.begin(), pool.begin() + 2000);
  ASSERT_EQ(harness.preload(stored, rows_of(stored, kDim)), 0u);
  std::set<int64_t> present(stored.begin(), stored.end());

  const std::vector<int64_t> keys = batch_of(rng, pool, 3001, options.empty_key);
  QueryBuffers<int64_t> buffers(Backend::kCuda, keys, kDim);
  // A captured query takes the two-step path; one direct call of that path first loads its
  // kernels, so the capture records launches only.
  harness.query(batch_of(rng, pool, 140000, options.empty_key));
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  buffers.run(cache, stream);
  cuda_ok(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0));

  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    if (replay > 0) {  // more keys stored between replays: the answer changes
      const std::vector<int64_t> more(pool.begin() + 2000 * replay,
                                      pool.begin() + 2000 * (replay + 1));
      harness.replace(more, rows_of(more, kDim));
      present.insert(more.begin(), more.end());
    }
    buffers.fill_values();
    cuda_ok(cudaGraphLaunch(exec, stream));
    cuda_ok(cudaStreamSynchronize(stream));
    const QueryOutput<int64_t> got = buffers.download();
    const QueryOutput<int64_t> want = expected(keys, present, kDim);
    EXPECT_EQ(got.missing_keys, want.missing_keys);
    EXPECT_EQ(got.missing_positions, want.missing_positions);
    EXPECT_EQ(got.values, want.values);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(CacheCudaQueryPaths, QueriesOnMoreStreamsThanKeptScratchAnswerAlike) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  TestRng rng;
  constexpr uint32_t kDim = 16;
  constexpr int kStreams = 80;  // the cache keeps scratch for 64 streams; the rest allocate
  // Streams with kept scratch list misses in any order (an arrival word per stream); the others
  // fall back to batch order: compared by position.
  const CacheOptions<int64_t> options = query_options(kDim, 8000, /*ordered=*/false);
  CacheHarness<int64_t> harness(Backend::kCuda, options);
  const std::vector<int64_t> pool = distinct_keys(rng, 8000);
  const std::vector<int64_t> stored(pool.begin(), pool.begin() + 5000);
  ASSERT_EQ(harness.preload(stored, rows_of(stored, kDim)), 0u);
  const std::set<int64_t> present(stored.begin(), stored.end());
  const std::vector<int64_t> keys = batch_of(rng, pool, 2500, options.empty_key);
  const QueryOutput<int64_t> want = expected(keys, present, kDim);
  // Every stream queries twice (its kept scratch is reused by the second call) into its own
  // buffers; all calls are queued before any is waited for.
  std::vector<cudaStream_t> streams(kStreams);
  std::vector<QueryBuffers<int64_t>> outs;
  for (int s = 0; s < kStreams; ++s) {
    cuda_ok(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
    outs.emplace_back(Backend::kCuda, keys, kDim);
  }
  for (int round = 0; round < 2; ++round) {
    for (int s = 0; s < kStreams; ++s) outs[s].run(harness.cache(), streams[s]);
  }
  for (int s = 0; s < kStreams; ++s) {
    SCOPED_TRACE("stream " + std::to_string(s));
    cuda_ok(cudaStreamSynchronize(streams[s]));
    ASSERT_NO_FATAL_FAILURE(assert_answer(outs[s].download(), want, /*ordered=*/false));
    cudaStreamDestroy(streams[s]);
  }
}

// Queries launched as per-stream graphs (query_graphs, the default) against kernel launches: a
// burst of calls of one shape on one stream, each with its own keys and outputs, is queued before
// any is waited for, so that a call whose parameters were set into the shape's graph after an
// earlier call was launched shows if that earlier call saw them; then the same on a second
// stream, and sizes of other shapes in between.
TEST(CacheCudaQueryPaths, GraphLaunchedQueriesAnswerAsKernelLaunchedOnes) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  TestRng rng;
  constexpr uint32_t kDim = 32;
  const std::vector<int64_t> pool = distinct_keys(rng, 16000);
  const std::vector<int64_t> stored(pool.begin(), pool.begin() + 10000);
  const std::set<int64_t> present(stored.begin(), stored.end());
  for (const bool ordered : {true, false}) {
    for (const bool graphs : {true, false}) {
      SCOPED_TRACE(std::string(graphs ? "graphs" : "kernel launches") +
                   (ordered ? "" : ", misses in any order"));
      CacheOptions<int64_t> options = query_options(kDim, 12000, ordered);
      options.query_graphs = graphs;
      CacheHarness<int64_t> harness(Backend::kCuda, options);
      ASSERT_EQ(harness.preload(stored, rows_of(stored, kDim)), 0u);
      cudaStream_t streams[2];
      for (cudaStream_t& s : streams) cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      std::vector<std::vector<int64_t>> batches;
      std::vector<QueryBuffers<int64_t>> calls;
      const std::vector<size_t> sizes = {2048, 2048, 9, 2048, 2048, 12001, 2048, 2048};
      for (size_t c = 0; c < 2 * sizes.size(); ++c) {
        batches.push_back(batch_of(rng, pool, sizes[c % sizes.size()], options.empty_key));
        calls.emplace_back(Backend::kCuda, batches.back(), kDim);
      }
      cuda_ok(cudaDeviceSynchronize());
      // The first half on one stream, the second on the other, all queued before any wait.
      for (size_t c = 0; c < calls.size(); ++c)
        calls[c].run(harness.cache(), streams[c / sizes.size()]);
      cuda_ok(cudaDeviceSynchronize());
      uint64_t queried = 0, missed = 0;
      for (size_t c = 0; c < calls.size(); ++c) {
        SCOPED_TRACE("call " + std::to_string(c));
        const QueryOutput<int64_t> want = expected(batches[c], present, kDim);
        ASSERT_NO_FATAL_FAILURE(assert_answer(calls[c].download(), want, ordered));
        queried += batches[c].size();
        missed += want.missing_keys.size();
      }
      expect_counted(harness.cache(), queried, missed);
      for (cudaStream_t s : streams) cudaStreamDestroy(s);
    }
  }
}

// A cache's first query on a fresh non-blocking stream while the legacy stream is busy: the
// stream's scratch (tile counts, arrival word) must be cleared in that stream's order, or the
// query reads whatever the allocation held. Freed memory is dirtied first so that it shows.
TEST(CacheCudaQueryPaths, FirstQueryOnANonBlockingStreamSeesClearedScratch) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  TestRng rng;
  constexpr uint32_t kDim = 8;
  const std::vector<int64_t> pool = distinct_keys(rng, 4000);
  const std::vector<int64_t> stored(pool.begin(), pool.begin() + 2000);
  const std::set<int64_t> present(stored.begin(), stored.end());
  void* busy = nullptr;
  cuda_ok(cudaMalloc(&busy, size_t{1} << 30));
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    {
      void* dirty = nullptr;
      cuda_ok(cudaMalloc(&dirty, size_t{64} << 20));
      cuda_ok(cudaMemset(dirty, 0xA5, size_t{64} << 20));
      cuda_ok(cudaDeviceSynchronize());
      cuda_ok(cudaFree(dirty));
    }
    const CacheOptions<int64_t> options = query_options(kDim, 4000, round % 2 == 0);
    CacheHarness<int64_t> harness(Backend::kCuda, options);
    ASSERT_EQ(harness.preload(stored, rows_of(stored, kDim)), 0u);
    const std::vector<int64_t> keys = batch_of(rng, pool, 2048, options.empty_key);
    QueryBuffers<int64_t> buffers(Backend::kCuda, keys, kDim);
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cuda_ok(cudaMemsetAsync(busy, round, size_t{1} << 30, nullptr));  // the legacy stream, busy
    buffers.run(harness.cache(), stream);
    cuda_ok(cudaStreamSynchronize(stream));
    cuda_ok(cudaDeviceSynchronize());
    const QueryOutput<int64_t> got = buffers.download();
    const QueryOutput<int64_t> want = expected(keys, present, kDim);
    ASSERT_EQ(got.missing_keys.size(), want.missing_keys.size());
    EXPECT_EQ(by_position(got), by_position(want));
    EXPECT_EQ(got.values, want.values);
    cudaStreamDestroy(stream);
  }
  cudaFree(busy);
}

}  // namespace
}  // namespace dynemb::cache::testing

// Bad input: a clear error naming the argument, the value and the limit, and the cache unchanged.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/cache_harness.hpp"
#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::cache::testing {
namespace {

using dynemb::testing::BackendTest;
using dynemb::testing::TestRng;

class CacheErrorsTest : public BackendTest {};

// Runs `call`, expecting an exception of type E whose message contains every fragment.
template <class E, class F>
void expect_error(F&& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
    }
  }
}

TEST_P(CacheErrorsTest, BadOptionsNameTheFieldAndTheLimit) {
  const Backend b = GetParam();
  CacheOptions<int64_t> good;
  good.dim = 8;
  good.capacity_rows = 1000;
  auto with = [&](auto change) {
    CacheOptions<int64_t> o = good;
    change(o);
    return o;
  };
  expect_error<InvalidArgument>([&] { make_cache(b, with([](auto& o) { o.dim = 0; })); },
                                {"dim = 0", "> 0"});
  expect_error<InvalidArgument>([&] { make_cache(b, with([](auto& o) { o.capacity_rows = 0; })); },
                                {"capacity_rows", "must be > 0"});
  expect_error<InvalidArgument>(
      [&] { make_cache(b, with([](auto& o) { o.capacity_bytes = 1 << 20; })); },
      {"capacity_bytes = 1048576", "capacity_rows = 1000"});
  expect_error<InvalidArgument>([&] { make_cache(b, with([](auto& o) { o.ways = 48; })); },
                                {"ways = 48", "32, 64 or 128"});
  expect_error<InvalidArgument>(
      [&] {
        make_cache(b, with([](auto& o) {
                     o.capacity_rows = 0;
                     o.capacity_bytes = 100;
                   }));
      },
      {"capacity_bytes = 100", "at least two sets"});
}

TEST_P(CacheErrorsTest, CapacityBeyondMemoryIsOutOfMemory) {
  CacheOptions<int64_t> options;
  options.dim = 1024;
  options.capacity_rows = uint64_t{1} << 36;  // 64G rows of 4 KiB
  const CacheFootprint f = cache_footprint(GetParam(), options);
  // The free device memory may move between two reads of it, so only the host's figure is exact.
  std::vector<std::string> fragments = {"needs " + std::to_string(f.bytes) + " bytes",
                                        to_string(GetParam()) + " memory available"};
  if (GetParam() == Backend::kCpu) {
    fragments.push_back(std::to_string(cache_memory_available(Backend::kCpu, 0)) + " bytes");
  }
  expect_error<OutOfMemory>([&] { make_cache(GetParam(), options); }, fragments);
}

TEST_P(CacheErrorsTest, SentinelKeysAreRefusedAndLeaveTheCacheUnchanged) {
  TestRng rng;
  CacheOptions<int64_t> options;
  options.dim = 4;
  options.capacity_rows = 1000;
  options.empty_key = -5;
  CacheHarness<int64_t> cache(GetParam(), options);
  std::vector<int64_t> keys(300);
  for (auto& k : keys) k = static_cast<int64_t>(rng.uniform(0, 1u << 30));
  cache.replace(keys, rows_of(keys, options.dim));
  const Contents<int64_t> before = cache.dump_all();
  const CacheStats stats_before = cache.cache().stats();

  std::vector<int64_t> bad = keys;
  const size_t at = rng.uniform(0, bad.size() - 1);
  bad[at] = -5;
  const std::vector<std::string> message = {"keys[" + std::to_string(at) + "] = -5", "empty_key"};
  const std::vector<float> rows = rows_of(bad, options.dim, 3);
  expect_error<InvalidArgument>([&] { cache.replace(bad, rows); }, message);
  expect_error<InvalidArgument>([&] { cache.update(bad, rows); }, message);
  expect_error<InvalidArgument>([&] { cache.erase(bad); }, message);
  expect_error<InvalidArgument>([&] { cache.query(bad); }, message);
  expect_error<InvalidArgument>([&] { cache.preload(bad, rows); }, message);
  EXPECT_EQ(cache.dump_all(), before);
  const CacheStats stats_after = cache.cache().stats();
  EXPECT_EQ(stats_after.hits, stats_before.hits);
  EXPECT_EQ(stats_after.misses, stats_before.misses);
  EXPECT_EQ(stats_after.inserted, stats_before.inserted);
}

TEST_P(CacheErrorsTest, UnvalidatedSentinelKeysAreSkippedAndCounted) {
  CacheOptions<int32_t> options;
  options.dim = 3;
  options.capacity_rows = 100;
  options.validate_keys = false;  // empty_key = -1
  CacheHarness<int32_t> cache(GetParam(), options);
  const std::vector<int32_t> keys = {7, -1, 9, -1};
  cache.replace(keys, rows_of(keys, options.dim));
  const Contents<int32_t> contents = cache.dump_all();
  EXPECT_EQ(contents.size(), 2u);
  EXPECT_EQ(contents.count(-1), 0u);
  const QueryOutput<int32_t> got = cache.query(keys);
  EXPECT_EQ(got.missing_positions, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(cache.cache().stats().sentinel_keys, 4u);
}

TEST_P(CacheErrorsTest, BadRangesAndOversizedPreloadsAreRefused) {
  CacheOptions<int64_t> options;
  options.dim = 2;
  options.capacity_rows = 500;
  CacheHarness<int64_t> cache(GetParam(), options);
  const uint64_t sets = cache.cache().num_sets();
  expect_error<InvalidArgument>([&] { cache.dump(sets + 1, 0); },
                                {"first_set = " + std::to_string(sets + 1)});
  expect_error<InvalidArgument>([&] { cache.dump(1, sets); },
                                {"num_sets = " + std::to_string(sets)});
  const size_t rows = cache.cache().footprint().rows;
  std::vector<int64_t> keys(rows + 1);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i);
  expect_error<InvalidArgument>(
      [&] { cache.preload(keys, rows_of(keys, options.dim)); },
      {"n = " + std::to_string(rows + 1), std::to_string(rows) + " rows"});
  EXPECT_EQ(cache.cache().size(), 0u);
  expect_error<InvalidArgument>([&] { cache.cache().replace(3, nullptr, nullptr); },
                                {"keys = nullptr"});
}

INSTANTIATE_TEST_SUITE_P(Backends, CacheErrorsTest, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb::cache::testing

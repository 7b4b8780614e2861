// dedup_grouped_async (the host-sync-free step's dedup): the unique count stays in backend memory,
// the sort covers the bits the caller names. Against a std::map model: the unique keys ascending,
// each id's inverse, the ids grouped by unique key (ascending in a group) with where each group
// starts, and each id's bag in that order (also without the grouped ids: the bags only). Short
// and long batches, narrow (<= 32 bits) and wide sorts, several batches on one workspace.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

using ops_test::download;
using ops_test::upload;

class DedupAsync : public dynemb::testing::BackendTest {};

TEST_P(DedupAsync, MatchesAMapModel) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;
  std::mt19937_64& rng = test_rng.engine();
  const OpsBackend& ops = ops_backend(backend);
  ops::detail::StepWorkspace workspace(backend, 0);
  struct Shape {
    size_t n;
    int bits;  // keys below 2^bits; the sort's end bit
  };
  for (const Shape shape : {Shape{1000, 12}, Shape{5000, 32}, Shape{0, 8}, Shape{70000, 24},
                            Shape{3000, 45}, Shape{1, 1}, Shape{200000, 20}}) {
    SCOPED_TRACE("n " + std::to_string(shape.n) + ", bits " + std::to_string(shape.bits));
    const size_t n = shape.n;
    std::vector<uint64_t> keys(n);
    for (auto& k : keys) {
      k = rng() % 4 == 0 ? 1 : rng() & ((uint64_t{1} << shape.bits) - 1);
    }
    // Bags of 0 to 7 ids.
    std::vector<int64_t> offsets{0};
    while (static_cast<size_t>(offsets.back()) < n) {
      offsets.push_back(std::min<int64_t>(offsets.back() + static_cast<int64_t>(rng() % 8), n));
    }
    const size_t bags = offsets.size() - 1;
    std::map<uint64_t, std::vector<uint32_t>> model;  // key -> its ids, ascending
    for (size_t i = 0; i < n; ++i) model[keys[i]].push_back(static_cast<uint32_t>(i));
    std::vector<uint32_t> bag_of(n);
    for (size_t b = 0; b < bags; ++b) {
      for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) bag_of[i] = static_cast<uint32_t>(b);
    }

    auto k = upload(backend, keys);
    auto o = upload(backend, offsets);
    // With the grouped ids, then without them (the bags only: what a pooled backward without
    // weights reads).
    for (const bool with_ids : {true, false}) {
      SCOPED_TRACE(with_ids ? "ids and bags" : "bags only");
      BackendBuffer<uint64_t> unique(backend, n + 1), count(backend, 1);
      BackendBuffer<uint32_t> inverse(backend, n + 1), ids(backend, n + 1),
          row_begin(backend, n + 2), bag_by_row(backend, n + 1);
      const bool bags_wanted = ops.reads_bag_by_row() || !with_ids;
      ops::detail::dedup_grouped_async(ops, n, k.data(), unique.data(), inverse.data(),
                                       with_ids ? ids.data() : nullptr, row_begin.data(),
                                       bags_wanted ? bag_by_row.data() : nullptr, o.data(), bags,
                                       shape.bits, count.data(), workspace, nullptr);
      backend_synchronize(backend);
      const size_t u = download(count, 1)[0];
      ASSERT_EQ(u, model.size());
      const std::vector<uint64_t> got_unique = download(unique, u);
      const std::vector<uint32_t> got_inverse = download(inverse, n), got_ids = download(ids, n),
                                  got_begin = download(row_begin, u + 1),
                                  got_bags = download(bag_by_row, n);
      size_t r = 0;
      for (const auto& [key, members] : model) {
        ASSERT_EQ(got_unique[r], key) << r;
        ASSERT_EQ(got_begin[r + 1] - got_begin[r], members.size()) << r;
        for (size_t j = 0; j < members.size(); ++j) {
          const uint32_t id = members[j];
          if (with_ids) EXPECT_EQ(got_ids[got_begin[r] + j], id) << r;
          EXPECT_EQ(got_inverse[id], r) << id;
          if (bags_wanted) EXPECT_EQ(got_bags[got_begin[r] + j], bag_of[id]) << id;
        }
        ++r;
      }
      EXPECT_EQ(got_begin[0], 0u);
      EXPECT_EQ(got_begin[u], n);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DedupAsync, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

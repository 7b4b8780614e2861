// detail::order_rows_by_first_id against a host reference that finds each row's first id from the
// batch's rows directly (not from the grouped ids): random batches of Zipf-like rows, each row in
// use holding at least one id (as a dedup's rows do), with the live count given in backend memory
// under a larger bound of rows, as the host-sync-free step gives it. Then the fused backward
// through that order against the same pass in key order, bit for bit (Adam, bags from the groups).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "ops/backend_vectors.hpp"
#include "ops/ids_by_row.hpp"

namespace dynemb {
namespace {

using ops_test::download;
using ops_test::same_bits;
using ops_test::upload;

// A batch of `bags` bags over rows numbered by first appearance, so every row 0 .. num_rows - 1
// holds an id (a dedup's rows do); heavy-tailed row choice, so some rows hold many ids.
struct Batch {
  std::vector<uint32_t> indices;  // each id's row (the dedup's inverse)
  std::vector<int64_t> offsets{0};
  size_t num_rows = 0;
};

Batch make_batch(std::mt19937_64& rng, size_t bags, size_t key_space) {
  Batch b;
  std::vector<uint32_t> row_of(key_space, std::numeric_limits<uint32_t>::max());
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t bag = 0; bag < bags; ++bag) {
    const int len = static_cast<int>(rng() % 12);
    for (int j = 0; j < len; ++j) {
      // Key k with probability about proportional to 1 / (k + 1).
      const auto key = static_cast<size_t>(std::pow(static_cast<double>(key_space), u(rng))) - 1;
      if (row_of[key] == std::numeric_limits<uint32_t>::max())
        row_of[key] = static_cast<uint32_t>(b.num_rows++);
      b.indices.push_back(row_of[key]);
    }
    b.offsets.push_back(static_cast<int64_t>(b.indices.size()));
  }
  return b;
}

// The rows sorted by the position of their first id, worked out from the indices alone.
std::vector<uint32_t> rows_by_first_id(const Batch& b) {
  std::vector<size_t> first(b.num_rows, std::numeric_limits<size_t>::max());
  for (size_t i = 0; i < b.indices.size(); ++i)
    first[b.indices[i]] = std::min(first[b.indices[i]], i);
  std::vector<uint32_t> rows(b.num_rows);
  for (size_t r = 0; r < b.num_rows; ++r) rows[r] = static_cast<uint32_t>(r);
  std::sort(rows.begin(), rows.end(), [&](uint32_t x, uint32_t y) { return first[x] < first[y]; });
  return rows;
}

class RowOrder : public dynemb::testing::BackendTest {};

TEST_P(RowOrder, ListsEveryLiveRowByItsFirstId) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed; failures show DYNEMB_TEST_SEED
  std::mt19937_64& rng = test_rng.engine();
  ops::detail::StepWorkspace workspace(backend, 0);
  for (const size_t bags : {1u, 7u, 300u, 5000u}) {
    SCOPED_TRACE("bags " + std::to_string(bags));
    const Batch b = make_batch(rng, bags, 4 * bags + 10);
    if (b.indices.empty()) continue;
    const size_t n = b.indices.size();
    const ops_test::IdsByRow g = ops_test::group_ids_by_row(b.indices, b.offsets, b.num_rows);
    // The rows' bound: every id its own row, as the host-sync-free step passes it; the rows past
    // the live count are padding the op must not read (row_begin holds junk there).
    std::vector<uint32_t> row_begin = g.row_begin;
    row_begin.resize(n + 1, 0xFFFFFFFFu);
    const auto inverse = upload(backend, b.indices);
    const auto ids_by_row = upload(backend, g.ids_by_row);
    const auto begin = upload(backend, row_begin);
    const auto live = upload(backend, std::vector<uint64_t>{b.num_rows});
    for (const bool bound : {false, true}) {
      BackendBuffer<uint32_t> order(backend, n + 1);
      ops::detail::order_rows_by_first_id(ops_backend(backend), n, inverse.data(),
                                          bound ? n : b.num_rows, bound ? live.data() : nullptr,
                                          {ids_by_row.data(), begin.data()}, order.data(),
                                          workspace, nullptr);
      backend_synchronize(backend);
      EXPECT_EQ(download(order, b.num_rows), rows_by_first_id(b)) << (bound ? "live count" : "");
    }
  }
}

TEST_P(RowOrder, FusedBackwardInThatOrderChangesNoRow) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed; failures show DYNEMB_TEST_SEED
  std::mt19937_64& rng = test_rng.engine();
  const uint32_t dim = 128;
  const Batch b = make_batch(rng, 2000, 6000);
  const size_t n = b.indices.size(), num_rows = b.num_rows;
  const ops_test::IdsByRow g = ops_test::group_ids_by_row(b.indices, b.offsets, num_rows);
  std::normal_distribution<float> normal;
  std::vector<float> grads((b.offsets.size() - 1) * dim);
  for (float& v : grads) v = normal(rng);
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.learning_rate = 0.01f;
  o.weight_decay = 0.01f;
  const uint32_t row_dim = dim + optimizer_state_dim(o.kind, dim);
  std::vector<float> storage(num_rows * row_dim, 0.0f);
  for (size_t r = 0; r < num_rows; ++r) {
    for (uint32_t j = 0; j < dim; ++j) storage[r * row_dim + j] = normal(rng);
  }
  const auto inverse = upload(backend, b.indices);
  const auto offsets = upload(backend, b.offsets);
  const auto ids_by_row = upload(backend, g.ids_by_row);
  const auto row_begin = upload(backend, g.row_begin);
  const auto bag_by_row = upload(backend, g.bag_by_row);
  const auto grad = upload(backend, grads);
  BackendBuffer<uint32_t> order(backend, num_rows + 1);
  ops::detail::StepWorkspace workspace(backend, 0);
  ops::detail::IdGroups groups{ids_by_row.data(), row_begin.data(), bag_by_row.data()};
  ops::detail::order_rows_by_first_id(ops_backend(backend), n, inverse.data(), num_rows, nullptr,
                                      groups, order.data(), workspace, nullptr);
  std::vector<std::vector<float>> results;
  for (const bool ordered : {false, true}) {
    auto rows = upload(backend, storage);
    std::vector<float*> ptrs(num_rows);
    for (size_t r = 0; r < num_rows; ++r) ptrs[r] = rows.data() + r * row_dim;
    const auto row_ptrs = upload(backend, ptrs);
    LookupFeature f;
    f.row_ptrs = row_ptrs.data();
    f.dim = dim;
    f.row_stride = row_dim;
    f.num_rows = num_rows;
    f.indices = inverse.data();
    f.num_ids = n;
    f.offsets = offsets.data();
    f.num_bags = b.offsets.size() - 1;
    f.mode = PoolingMode::kSum;
    ops::detail::IdGroups gr = groups;
    if (ordered) gr.row_order = order.data();
    for (int step = 0; step < 3; ++step) {
      ops::detail::reduce_and_optimize_row_ptrs(backend, o, f, gr, {grad.data(), dim},
                                                row_ptrs.data(), nullptr, nullptr, workspace,
                                                nullptr);
    }
    backend_synchronize(backend);
    results.push_back(download(rows, storage.size()));
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_FALSE(same_bits(results[0], storage)) << "the rows were updated";
}

INSTANTIATE_TEST_SUITE_P(Backends, RowOrder, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

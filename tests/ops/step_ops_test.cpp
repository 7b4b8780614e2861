// The training-step entry points (include/dynemb/ops/step_ops.hpp) on the CPU: grouped dedup
// against a std::map model, the grouped reduction bit-identical to reduce_gradients and close to a
// float64 sum, the guarded optimizer skipping and counting NaN / Inf rows, device-side flag counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/ops/step_ops.hpp"

namespace dynemb {
namespace {

constexpr Backend kCpu = Backend::kCpu;

// The CPU's dedup needs no scratch; one workspace serves the calls of a test.
ops::detail::StepWorkspace workspace(kCpu, 0);

TEST(StepOps, DedupGroupedMatchesAMapModel) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 5000;
  std::vector<int64_t> keys(n);
  for (auto& k : keys) k = static_cast<int64_t>(rng() % 700) - 350;
  keys[17] = 12345;  // one singleton
  std::map<int64_t, std::vector<uint32_t>> model;
  for (size_t i = 0; i < n; ++i) model[keys[i]].push_back(static_cast<uint32_t>(i));
  std::vector<int64_t> offsets{0, 100, 100, static_cast<int64_t>(n)};
  std::vector<int64_t> unique(n);
  std::vector<uint32_t> inverse(n), ids(n), begin(n + 1), bags(n);
  const size_t u = ops::detail::dedup_grouped<int64_t>(
      kCpu, n, keys.data(), unique.data(), inverse.data(), ids.data(), begin.data(), bags.data(),
      offsets.data(), 3, "test", {}, workspace, nullptr);
  ASSERT_EQ(u, model.size());
  size_t r = 0;
  for (const auto& [key, positions] : model) {
    EXPECT_EQ(unique[r], key);
    ASSERT_EQ(begin[r + 1] - begin[r], positions.size()) << "key " << key;
    for (size_t k = 0; k < positions.size(); ++k) {
      EXPECT_EQ(ids[begin[r] + k], positions[k]);
      EXPECT_EQ(inverse[positions[k]], r);
      EXPECT_EQ(bags[begin[r] + k], positions[k] < 100 ? 0u : 2u) << "bag 1 is empty";
    }
    ++r;
  }
  EXPECT_EQ(begin[u], n);
  offsets = {0, 200, 100, static_cast<int64_t>(n)};
  EXPECT_THROW(ops::detail::dedup_grouped<int64_t>(
                   kCpu, n, keys.data(), unique.data(), inverse.data(), ids.data(), begin.data(),
                   bags.data(), offsets.data(), 3, "test", {}, workspace, nullptr),
               InvalidArgument);
  offsets = {0, 100, 200, static_cast<int64_t>(n) + 1};
  EXPECT_THROW(ops::detail::dedup_grouped<int64_t>(
                   kCpu, n, keys.data(), unique.data(), inverse.data(), ids.data(), begin.data(),
                   bags.data(), offsets.data(), 3, "test", {}, workspace, nullptr),
               InvalidArgument);
}

TEST(StepOps, GroupedReductionIsBitIdenticalToReduceGradients) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}) {
    const uint32_t dim = 12;
    const size_t bags = 3000;
    std::vector<int64_t> keys, offsets{0};
    std::vector<float> weights;
    for (size_t b = 0; b < bags; ++b) {
      const int len = static_cast<int>(rng() % 8);
      for (int j = 0; j < len; ++j) {
        keys.push_back(rng() % 3 == 0 ? 7 : static_cast<int64_t>(rng() % 400));  // 7 is hot
        weights.push_back(normal(rng));
      }
      offsets.push_back(static_cast<int64_t>(keys.size()));
    }
    const size_t n = keys.size();
    std::vector<int64_t> unique(n);
    std::vector<uint32_t> inverse(n), ids(n), begin(n + 1);
    const size_t u = ops::detail::dedup_grouped<int64_t>(
        kCpu, n, keys.data(), unique.data(), inverse.data(), ids.data(), begin.data(), nullptr,
        offsets.data(), bags, "test", {}, workspace, nullptr);
    ASSERT_GT(
        begin[1 + std::distance(unique.begin(), std::find(unique.begin(), unique.begin() + u, 7))] -
            begin[std::distance(unique.begin(), std::find(unique.begin(), unique.begin() + u, 7))],
        3 * kGradientChunk)
        << "the hot key spans several chunks";
    LookupFeature f;
    f.dim = dim;
    f.row_stride = dim;
    f.num_rows = u;
    f.indices = inverse.data();
    f.num_ids = n;
    f.offsets = offsets.data();
    f.num_bags = bags;
    f.weights = weights.data();
    f.mode = mode;
    const size_t out_rows = mode == PoolingMode::kNone ? n : bags;
    std::vector<float> grad(out_rows * dim), a(u * dim), b(u * dim, -1.0f);
    for (auto& g : grad) g = normal(rng);
    std::vector<float> rows(u * dim);
    f.rows = rows.data();
    const LookupOutput g{grad.data(), dim}, ra{a.data(), dim}, rb{b.data(), dim};
    reduce_gradients(kCpu, {&f, 1}, {&g, 1}, {&ra, 1});
    ops::detail::reduce_gradients_grouped(kCpu, f, {ids.data(), begin.data()}, g, rb, nullptr);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << to_string(mode);
    // Against a float64 sum.
    std::vector<double> ref(u * dim, 0.0);
    for (size_t bag = 0; bag < bags; ++bag) {
      const int64_t lo = offsets[bag], hi = offsets[bag + 1];
      for (int64_t i = lo; i < hi; ++i) {
        double factor = weights[i];
        if (mode == PoolingMode::kMean) factor = double(weights[i]) / double(hi - lo);
        const float* src = grad.data() + (mode == PoolingMode::kNone ? i : bag) * dim;
        for (uint32_t j = 0; j < dim; ++j) ref[inverse[i] * dim + j] += factor * src[j];
      }
    }
    for (size_t k = 0; k < ref.size(); ++k) {
      ASSERT_NEAR(b[k], ref[k], 1e-3 * (1.0 + std::abs(ref[k]))) << to_string(mode) << " " << k;
    }
  }
}

TEST(StepOps, GuardedOptimizerSkipsAndCountsNonFiniteRows) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  const uint32_t dim = 8, stride = 28;  // 8 + 17 state, then padding
  const size_t n = 300;
  std::vector<float> rows(n * stride, 0.0f), grads(n * dim);
  for (auto& v : grads) v = normal(rng);
  for (size_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < dim; ++j) rows[i * stride + j] = normal(rng);
  grads[5 * dim + 2] = NAN;
  grads[77 * dim] = INFINITY;
  std::unique_ptr<bool[]> skip(new bool[n]);
  for (size_t i = 0; i < n; ++i) skip[i] = i % 10 == 3;
  std::vector<float> expected = rows;
  for (size_t i = 0; i < n; ++i) {
    if (i == 5 || i == 77 || skip[i]) continue;
    apply_optimizer(o, expected.data() + i * stride, grads.data() + i * dim, dim);
  }
  uint64_t nonfinite = 4;
  ops::detail::apply_optimizer_rows_guarded(kCpu, o, n, rows.data(), stride, grads.data(), dim, dim,
                                            skip.get(), &nonfinite, nullptr);
  EXPECT_EQ(nonfinite, 6u);
  EXPECT_EQ(0, std::memcmp(rows.data(), expected.data(), rows.size() * sizeof(float)));
  uint64_t count = 1;
  ops::detail::count_flags(kCpu, n, skip.get(), true, &count, nullptr);
  EXPECT_EQ(count, 1u + 30u);
}

}  // namespace
}  // namespace dynemb

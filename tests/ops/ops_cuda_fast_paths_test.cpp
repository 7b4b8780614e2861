// The GPU's fast paths against the CPU on the same random inputs: float4 and scalar lanes,
// rows padded to 16 bytes and not, hot rows of many gradient chunks, dims over one 128-float
// tile, the grouped dedup and reduction of a training step, the guarded optimizer and the
// device-side counts. Pooling and reduction must be bit-identical; optimizer rows agree within
// float32 tolerance (the warp sums a row in another order). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

constexpr Backend kGpu = Backend::kCuda;

using ops_test::to_gpu;
using ops_test::to_host;

class OpsCudaFastPaths : public testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// A Zipf-like batch over `keys` ids: key 0 takes ~1/3 of the ids (hundreds of chunks).
struct Batch {
  std::vector<int64_t> keys, offsets{0};
  std::vector<float> weights;
};

Batch make_batch(std::mt19937_64& rng, size_t bags, int max_len, uint64_t keys) {
  Batch b;
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < bags; ++i) {
    const int len = static_cast<int>(rng() % (max_len + 1));
    for (int j = 0; j < len; ++j) {
      const uint64_t r = rng();
      b.keys.push_back(r % 3 == 0 ? 0 : static_cast<int64_t>((r >> 8) % keys) * 7919 - 5000);
      b.weights.push_back(normal(rng));
    }
    b.offsets.push_back(static_cast<int64_t>(b.keys.size()));
  }
  return b;
}

struct Shape {
  uint32_t dim, row_stride, out_stride;
};

TEST_F(OpsCudaFastPaths, PoolingAndReductionBitIdenticalOnEveryPath) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  // float4 (aligned, one tile), float4 over two tiles with a partial one, scalar (odd dim),
  // scalar because the stride is not a multiple of 4.
  for (const Shape shape :
       {Shape{128, 388, 128}, Shape{200, 204, 204}, Shape{37, 40, 37}, Shape{64, 66, 64}}) {
    for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}) {
      SCOPED_TRACE("dim " + std::to_string(shape.dim) + " mode " + to_string(mode));
      const Batch b = make_batch(rng, 3000, 24, 900);
      const size_t n = b.keys.size(), bags = b.offsets.size() - 1;
      std::vector<int64_t> unique(n);
      std::vector<uint32_t> inverse(n), ids(n), begin(n + 1), bag_by_row(n);
      ops::detail::StepWorkspace workspace(Backend::kCpu, 0);
      const size_t u = ops::detail::dedup_grouped<int64_t>(
          Backend::kCpu, n, b.keys.data(), unique.data(), inverse.data(), ids.data(), begin.data(),
          bag_by_row.data(), b.offsets.data(), bags, "test", {}, workspace, nullptr);
      std::vector<float> rows(u * shape.row_stride);
      for (auto& v : rows) v = normal(rng);
      const size_t out_rows = mode == PoolingMode::kNone ? n : bags;
      std::vector<float> grad(out_rows * shape.out_stride);
      for (auto& g : grad) g = normal(rng);
      const bool weighted = rng() % 2 == 0;
      auto feature = [&](const float* r, const uint32_t* idx, const int64_t* off, const float* w) {
        LookupFeature f;
        f.rows = r;
        f.row_stride = shape.row_stride;
        f.dim = shape.dim;
        f.num_rows = u;
        f.indices = idx;
        f.num_ids = n;
        f.offsets = off;
        f.num_bags = bags;
        f.weights = weighted ? w : nullptr;
        f.mode = mode;
        return f;
      };
      std::vector<float> cout(out_rows * shape.out_stride, 0.0f), crg(u * shape.out_stride, 0.0f);
      const LookupFeature cf =
          feature(rows.data(), inverse.data(), b.offsets.data(), b.weights.data());
      const LookupOutput co{cout.data(), shape.out_stride}, cg{grad.data(), shape.out_stride},
          cr{crg.data(), shape.out_stride};
      pooled_lookup(Backend::kCpu, {&cf, 1}, {&co, 1});
      reduce_gradients(Backend::kCpu, {&cf, 1}, {&cg, 1}, {&cr, 1});

      auto drows = to_gpu(rows);
      auto dinv = to_gpu(inverse);
      auto doff = to_gpu(b.offsets);
      auto dw = to_gpu(b.weights);
      auto dgrad = to_gpu(grad);
      auto dkeys = to_gpu(b.keys);
      auto dout = to_gpu(std::vector<float>(cout.size(), 0.0f));
      auto drg = to_gpu(std::vector<float>(crg.size(), 0.0f));
      auto drg2 = to_gpu(std::vector<float>(crg.size(), 0.0f));
      const LookupFeature gf = feature(drows.data(), dinv.data(), doff.data(), dw.data());
      const LookupOutput go{dout.data(), shape.out_stride}, gg{dgrad.data(), shape.out_stride},
          gr{drg.data(), shape.out_stride}, gr2{drg2.data(), shape.out_stride};
      pooled_lookup(kGpu, {&gf, 1}, {&go, 1});
      reduce_gradients(kGpu, {&gf, 1}, {&gg, 1}, {&gr, 1});
      // The training step's path: the GPU's own grouped dedup, then the grouped reduction.
      BackendBuffer<int64_t> gunique(kGpu, n);
      BackendBuffer<uint32_t> ginv(kGpu, n), gids(kGpu, n), gbegin(kGpu, n + 1), gbags(kGpu, n);
      ops::detail::StepWorkspace gworkspace(kGpu, 0);
      const size_t gu = ops::detail::dedup_grouped<int64_t>(
          kGpu, n, dkeys.data(), gunique.data(), ginv.data(), gids.data(), gbegin.data(),
          gbags.data(), doff.data(), bags, "test", {}, gworkspace, nullptr);
      ASSERT_EQ(gu, u);
      EXPECT_EQ(to_host(gunique, u), std::vector<int64_t>(unique.begin(), unique.begin() + u));
      EXPECT_EQ(to_host(ginv, n), inverse);
      EXPECT_EQ(to_host(gids, n), ids);
      EXPECT_EQ(to_host(gbags, n), bag_by_row);
      EXPECT_EQ(to_host(gbegin, u + 1),
                std::vector<uint32_t>(begin.begin(), begin.begin() + u + 1));
      // SUM / MEAN: the bags in grouped order from the dedup, as the training step passes them.
      const ops::detail::IdGroups groups{gids.data(), gbegin.data(),
                                         mode == PoolingMode::kNone ? nullptr : gbags.data()};
      ops::detail::reduce_gradients_grouped(kGpu, gf, groups, gg, gr2, nullptr);
      const auto hout = to_host(dout, cout.size());
      const auto hrg = to_host(drg, crg.size());
      const auto hrg2 = to_host(drg2, crg.size());
      EXPECT_EQ(0, std::memcmp(hout.data(), cout.data(), cout.size() * sizeof(float))) << "forward";
      EXPECT_EQ(0, std::memcmp(hrg.data(), crg.data(), crg.size() * sizeof(float)))
          << "reduce_gradients";
      EXPECT_EQ(0, std::memcmp(hrg2.data(), crg.data(), crg.size() * sizeof(float)))
          << "reduce_gradients_grouped";
    }
  }
}

TEST_F(OpsCudaFastPaths, OneVeryHotRowAndRowsNoIdReads) {
  // 200K ids of one row (3125 chunks) beside a few cold ones; rows 5..9 read by no id.
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const uint32_t dim = 128;
  const size_t num_rows = 10, bags = 10000, n = 200000 + 50;
  std::vector<uint32_t> indices(n, 2);
  for (size_t k = 0; k < 50; ++k) indices[rng() % n] = static_cast<uint32_t>(rng() % 5);
  std::vector<int64_t> offsets(bags + 1);
  for (size_t b = 0; b <= bags; ++b) offsets[b] = static_cast<int64_t>(b * n / bags);
  std::vector<float> rows(num_rows * dim, 0.0f), grad(bags * dim);
  for (auto& g : grad) g = normal(rng);
  LookupFeature f;
  f.row_stride = dim;
  f.dim = dim;
  f.num_rows = num_rows;
  f.num_ids = n;
  f.num_bags = bags;
  f.mode = PoolingMode::kMean;
  f.rows = rows.data();
  f.indices = indices.data();
  f.offsets = offsets.data();
  std::vector<float> crg(num_rows * dim);
  const LookupOutput cg{grad.data(), dim}, cr{crg.data(), dim};
  reduce_gradients(Backend::kCpu, {&f, 1}, {&cg, 1}, {&cr, 1});
  auto drows = to_gpu(rows);
  auto didx = to_gpu(indices);
  auto doff = to_gpu(offsets);
  auto dgrad = to_gpu(grad);
  auto drg = to_gpu(std::vector<float>(num_rows * dim, 1.0f));
  f.rows = drows.data();
  f.indices = didx.data();
  f.offsets = doff.data();
  const LookupOutput gg{dgrad.data(), dim}, gr{drg.data(), dim};
  reduce_gradients(kGpu, {&f, 1}, {&gg, 1}, {&gr, 1});
  const auto hrg = to_host(drg, crg.size());
  EXPECT_EQ(0, std::memcmp(hrg.data(), crg.data(), crg.size() * sizeof(float)));
  for (uint32_t j = 0; j < dim; ++j) EXPECT_EQ(hrg[7 * dim + j], 0.0f) << "unread row is zero";
}

TEST_F(OpsCudaFastPaths, Float4OptimizerAndGuardMatchCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const size_t n = 1500;
  for (uint32_t dim : {128u, 260u}) {
    for (OptimizerKind kind :
         {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdaGrad,
          OptimizerKind::kRowWiseAdaGrad, OptimizerKind::kRmsProp, OptimizerKind::kFtrl}) {
      SCOPED_TRACE(to_string(kind) + " dim " + std::to_string(dim));
      OptimizerOptions o;
      o.kind = kind;
      o.learning_rate = 0.05f;
      o.eps = 1e-6f;
      o.initial_accumulator = 0.1f;
      o.weight_decay = 0.01f;
      o.clip_norm = kind == OptimizerKind::kAdam ? 3.0f : 0.0f;
      const uint32_t stride = (dim + optimizer_state_dim(kind, dim) + 3) / 4 * 4;  // padded
      std::vector<float> rows(n * stride, 0.0f), grads(n * dim);
      for (size_t i = 0; i < n; ++i)
        for (uint32_t j = 0; j < dim; ++j) rows[i * stride + j] = normal(rng);
      std::unique_ptr<bool[]> skip(new bool[n]);
      for (size_t i = 0; i < n; ++i) skip[i] = i % 13 == 0;
      auto drows = to_gpu(rows);
      BackendBuffer<bool> dskip(kGpu, n);
      dskip.upload(skip.get(), n);
      BackendBuffer<uint64_t> dcount(kGpu, 1);
      backend_zero(kGpu, dcount.data(), sizeof(uint64_t));
      uint64_t ccount = 0;
      for (int step = 0; step < 4; ++step) {
        for (auto& g : grads) g = normal(rng);
        grads[(step * 101 % n) * dim + 3] = step % 2 == 0 ? NAN : -INFINITY;
        auto dgrads = to_gpu(grads);
        ops::detail::apply_optimizer_rows_guarded(Backend::kCpu, o, n, rows.data(), stride,
                                                  grads.data(), dim, dim, skip.get(), &ccount,
                                                  nullptr);
        ops::detail::apply_optimizer_rows_guarded(kGpu, o, n, drows.data(), stride, dgrads.data(),
                                                  dim, dim, dskip.data(), dcount.data(), nullptr);
      }
      uint64_t gcount = 0;
      ops::detail::read_words(kGpu, dcount.data(), 1, &gcount, nullptr);
      EXPECT_EQ(gcount, ccount);
      EXPECT_EQ(ccount, 4u);
      const auto gpu_rows = to_host(drows, rows.size());
      for (size_t k = 0; k < rows.size(); ++k) {
        ASSERT_NEAR(gpu_rows[k], rows[k], 1e-4f * (1 + std::abs(rows[k]))) << "element " << k;
      }
      // The unguarded entry, float4 lanes: the same rows again.
      for (auto& g : grads) g = normal(rng);
      auto dgrads = to_gpu(grads);
      apply_optimizer_rows(Backend::kCpu, o, n, rows.data(), stride, grads.data(), dim, dim,
                           skip.get());
      apply_optimizer_rows(kGpu, o, n, drows.data(), stride, dgrads.data(), dim, dim, dskip.data());
      const auto gpu_rows2 = to_host(drows, rows.size());
      for (size_t k = 0; k < rows.size(); ++k) {
        ASSERT_NEAR(gpu_rows2[k], rows[k], 1e-4f * (1 + std::abs(rows[k]))) << "element " << k;
      }
    }
  }
}

TEST_F(OpsCudaFastPaths, RowCopiesAndCountsMatchCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const size_t n = 2000, src_rows = 3000;
  for (uint32_t width : {388u, 385u}) {
    const uint32_t stride = (width + 3) / 4 * 4;
    std::vector<float> src(src_rows * stride);
    for (auto& v : src) v = static_cast<float>(rng() % 100000);
    std::vector<uint32_t> index(n);
    for (size_t i = 0; i < n; ++i) index[i] = static_cast<uint32_t>((i * 7 + 3) % src_rows);
    std::vector<float> cpu(n * stride, -1.0f), back(src_rows * stride, -2.0f);
    gather_rows(Backend::kCpu, n, index.data(), src.data(), stride, cpu.data(), stride, width);
    scatter_rows(Backend::kCpu, n, index.data(), cpu.data(), stride, back.data(), stride, width);
    auto dsrc = to_gpu(src);
    auto didx = to_gpu(index);
    auto dgath = to_gpu(std::vector<float>(n * stride, -1.0f));
    auto dback = to_gpu(std::vector<float>(src_rows * stride, -2.0f));
    gather_rows(kGpu, n, didx.data(), dsrc.data(), stride, dgath.data(), stride, width);
    scatter_rows(kGpu, n, didx.data(), dgath.data(), stride, dback.data(), stride, width);
    EXPECT_EQ(to_host(dgath, cpu.size()), cpu) << "gather, width " << width;
    EXPECT_EQ(to_host(dback, back.size()), back) << "scatter, width " << width;
  }
  std::unique_ptr<bool[]> flags(new bool[n]);
  uint64_t expected = 5;
  for (size_t i = 0; i < n; ++i) {
    flags[i] = rng() % 3 == 0;
    expected += flags[i];
  }
  BackendBuffer<bool> dflags(kGpu, n);
  dflags.upload(flags.get(), n);
  BackendBuffer<uint64_t> dcount(kGpu, 1);
  const uint64_t five = 5;
  dcount.upload(&five, 1);
  ops::detail::count_flags(kGpu, n, dflags.data(), true, dcount.data(), nullptr);
  uint64_t got = 0;
  ops::detail::read_words(kGpu, dcount.data(), 1, &got, nullptr);
  EXPECT_EQ(got, expected);
}

TEST_F(OpsCudaFastPaths, GroupedDedupNamesBadOffsetsAndReadsAlong) {
  std::vector<int64_t> keys = {5, 3, 5, 9};
  auto dkeys = to_gpu(keys);
  BackendBuffer<int64_t> unique(kGpu, 4);
  BackendBuffer<uint32_t> inv(kGpu, 4), ids(kGpu, 4), begin(kGpu, 5);
  BackendBuffer<uint64_t> along(kGpu, 2);
  const std::vector<uint64_t> words = {11, 22};
  along.upload(words.data(), 2);
  uint64_t host[2] = {0, 0};
  ops::detail::StepWorkspace workspace(kGpu, 0);
  auto run = [&](const std::vector<int64_t>& offsets) {
    auto doff = to_gpu(offsets);
    return ops::detail::dedup_grouped<int64_t>(
        kGpu, keys.size(), dkeys.data(), unique.data(), inv.data(), ids.data(), begin.data(),
        nullptr, doff.data(), offsets.size() - 1, "Embedding::forward", {along.data(), 2, host},
        workspace, nullptr);
  };
  EXPECT_EQ(run({0, 2, 4}), 3u);
  EXPECT_EQ(host[0], 11u);
  EXPECT_EQ(host[1], 22u);
  EXPECT_EQ(to_host(ids, 4), (std::vector<uint32_t>{1, 0, 2, 3}));
  EXPECT_EQ(to_host(begin, 4), (std::vector<uint32_t>{0, 1, 3, 4}));
  auto expect_throw = [&](const std::vector<int64_t>& offsets, const char* needle) {
    try {
      run(offsets);
      ADD_FAILURE() << "no throw for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_throw({0, 3, 2, 4}, "offsets[2]");
  expect_throw({1, 2, 4}, "offsets[0]");
  expect_throw({0, 2, 5}, "num_ids");
}

}  // namespace
}  // namespace dynemb

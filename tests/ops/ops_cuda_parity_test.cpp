// The CUDA ops against the CPU ops on the same random inputs: dedup, pooling and gradient
// reduction must be bit-identical; the row ops exact. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/table/table.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

constexpr Backend kGpu = Backend::kCuda;

using ops_test::to_gpu;
using ops_test::to_host;

class OpsCudaParity : public testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// GPU dedup (unique keys, inverse, counts) equals the CPU dedup of the same keys.
template <class K>
void expect_dedup_like_cpu(const std::vector<K>& keys) {
  const size_t n = keys.size();
  std::vector<K> cu(n);
  std::vector<uint32_t> cinv(n), ccnt(n);
  const size_t cpu_u = dedup<K>(Backend::kCpu, n, keys.data(), cu.data(), cinv.data(), ccnt.data());
  auto dkeys = to_gpu(keys);
  BackendBuffer<K> du(kGpu, n);
  BackendBuffer<uint32_t> dinv(kGpu, n), dcnt(kGpu, n);
  const size_t gpu_u = dedup<K>(kGpu, n, dkeys.data(), du.data(), dinv.data(), dcnt.data());
  ASSERT_EQ(gpu_u, cpu_u);
  EXPECT_EQ(to_host(du, gpu_u), std::vector<K>(cu.begin(), cu.begin() + cpu_u));
  EXPECT_EQ(to_host(dinv, n), cinv);
  EXPECT_EQ(to_host(dcnt, gpu_u), std::vector<uint32_t>(ccnt.begin(), ccnt.begin() + cpu_u));
}

TEST_F(OpsCudaParity, DedupMatchesCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (size_t n : {size_t{1}, size_t{1000}, size_t{300000}}) {
    std::vector<int64_t> keys(n);
    for (auto& k : keys)
      k = static_cast<int64_t>(rng() % (n / 3 + 1)) - static_cast<int64_t>(n / 6) * 1000;
    expect_dedup_like_cpu(keys);
  }
}

// Batches long enough that the GPU sorts only the key bits that differ: keys sharing high bits,
// keys on both sides of zero, all keys equal, full-range keys; both key types.
TEST_F(OpsCudaParity, DedupOfLongBatchesSortsOnlyDifferingBitsAndMatchesCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 300000;
  for (int shape = 0; shape < 4; ++shape) {
    SCOPED_TRACE("shape " + std::to_string(shape));
    const uint64_t high = rng() & ~((uint64_t{1} << 40) - 1);
    std::vector<int64_t> signed_keys(n);
    std::vector<uint64_t> unsigned_keys(n);
    for (size_t i = 0; i < n; ++i) {
      uint64_t bits = 0;
      switch (shape) {
        case 0:  // shared high bits, 20 random low bits
          bits = high | (rng() & 0xFFFFF);
          break;
        case 1:  // small values on both sides of zero
          bits = static_cast<uint64_t>(static_cast<int64_t>(rng() % 200001) - 100000);
          break;
        case 2:  // one key
          bits = high | 12345;
          break;
        default:  // full range, with copies
          bits = i % 3 == 0 || i == 0 ? rng() : static_cast<uint64_t>(signed_keys[i - 1]);
      }
      if (is_reserved_key(bits)) bits = 7;
      signed_keys[i] = static_cast<int64_t>(bits);
      unsigned_keys[i] = bits;
    }
    expect_dedup_like_cpu(signed_keys);
    expect_dedup_like_cpu(unsigned_keys);
  }
}

TEST_F(OpsCudaParity, PoolingAndGradientReductionAreBitIdentical) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}) {
    const uint32_t dim = 40, stride = 45;
    const size_t num_rows = 500, bags = 2000;
    std::vector<float> rows(num_rows * stride), weights;
    for (auto& v : rows) v = normal(rng);
    std::vector<uint32_t> indices;
    std::vector<int64_t> offsets{0};
    for (size_t b = 0; b < bags; ++b) {
      const int len = static_cast<int>(rng() % 9);
      for (int j = 0; j < len; ++j) {
        indices.push_back(rng() % 37 == 0 ? 3 : rng() % num_rows);  // a hot row
        weights.push_back(normal(rng));
      }
      offsets.push_back(static_cast<int64_t>(indices.size()));
    }
    const size_t n = indices.size();
    const size_t out_rows = mode == PoolingMode::kNone ? n : bags;
    auto make = [&](const float* r, const uint32_t* idx, const int64_t* off, const float* w) {
      LookupFeature f;
      f.rows = r;
      f.row_stride = stride;
      f.dim = dim;
      f.num_rows = num_rows;
      f.indices = idx;
      f.num_ids = n;
      f.offsets = off;
      f.num_bags = bags;
      f.weights = w;
      f.mode = mode;
      return f;
    };
    std::vector<float> grad(out_rows * dim);
    for (auto& g : grad) g = normal(rng);
    // CPU
    std::vector<float> cout(out_rows * dim), crg(num_rows * dim);
    const LookupFeature cf = make(rows.data(), indices.data(), offsets.data(), weights.data());
    const LookupOutput co{cout.data(), dim}, cg{grad.data(), dim}, cr{crg.data(), dim};
    pooled_lookup(Backend::kCpu, {&cf, 1}, {&co, 1});
    reduce_gradients(Backend::kCpu, {&cf, 1}, {&cg, 1}, {&cr, 1});
    // GPU
    auto drows = to_gpu(rows);
    auto didx = to_gpu(indices);
    auto doff = to_gpu(offsets);
    auto dw = to_gpu(weights);
    auto dgrad = to_gpu(grad);
    BackendBuffer<float> dout(kGpu, out_rows * dim), drg(kGpu, num_rows * dim);
    const LookupFeature gf = make(drows.data(), didx.data(), doff.data(), dw.data());
    const LookupOutput go{dout.data(), dim}, gg{dgrad.data(), dim}, gr{drg.data(), dim};
    pooled_lookup(kGpu, {&gf, 1}, {&go, 1});
    reduce_gradients(kGpu, {&gf, 1}, {&gg, 1}, {&gr, 1});
    const auto hout = to_host(dout, out_rows * dim);
    const auto hrg = to_host(drg, num_rows * dim);
    EXPECT_EQ(0, std::memcmp(hout.data(), cout.data(), cout.size() * sizeof(float)))
        << "forward, mode " << to_string(mode);
    EXPECT_EQ(0, std::memcmp(hrg.data(), crg.data(), crg.size() * sizeof(float)))
        << "backward, mode " << to_string(mode);
  }
}

TEST_F(OpsCudaParity, BadOffsetsAndIndicesAreNamedOnTheGpu) {
  std::vector<float> rows(8, 1.0f);
  std::vector<uint32_t> indices = {0, 1, 3};
  std::vector<int64_t> offsets = {0, 2, 1};
  auto drows = to_gpu(rows);
  auto didx = to_gpu(indices);
  BackendBuffer<float> dout(kGpu, 8);
  auto check = [&](const char* needle) {
    auto doff = to_gpu(offsets);
    didx.upload(indices.data(), indices.size());
    LookupFeature f;
    f.rows = drows.data();
    f.row_stride = 2;
    f.dim = 2;
    f.num_rows = 4;
    f.indices = didx.data();
    f.num_ids = 3;
    f.offsets = doff.data();
    f.num_bags = 2;
    const LookupOutput o{dout.data(), 2};
    try {
      pooled_lookup(kGpu, {&f, 1}, {&o, 1});
      ADD_FAILURE() << "no throw for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  check("offsets[2]");
  offsets = {0, 2, 5};
  check("num_ids");
  offsets = {0, 2, 3};
  indices[2] = 4;
  check("indices[2] = 4");
}

TEST_F(OpsCudaParity, RowOpsMatchCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const size_t n = 3000;
  std::vector<uint64_t> keys(n);
  std::unique_ptr<bool[]> flags(new bool[n]);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = rng();
    flags[i] = rng() % 3 == 0;
  }
  InitializerOptions init;
  init.kind = InitializerKind::kTruncatedNormal;
  init.seed = rng();
  init.width = 20;
  std::vector<float> cpu_rows(n * 24, -1.0f);
  fill_initial_rows<uint64_t>(Backend::kCpu, n, keys.data(), flags.get(), true, init,
                              cpu_rows.data(), 24, 24);
  auto dkeys = to_gpu(keys);
  BackendBuffer<bool> dflags(kGpu, n);
  dflags.upload(flags.get(), n);
  auto drows = to_gpu(std::vector<float>(n * 24, -1.0f));
  fill_initial_rows<uint64_t>(kGpu, n, dkeys.data(), dflags.data(), true, init, drows.data(), 24,
                              24);
  const auto gpu_rows = to_host(drows, n * 24);
  EXPECT_EQ(0, std::memcmp(gpu_rows.data(), cpu_rows.data(), cpu_rows.size() * sizeof(float)))
      << "initializer rows bit-identical";
  std::vector<uint32_t> cpu_sel(n);
  const size_t cpu_m = select_indices(Backend::kCpu, n, flags.get(), false, cpu_sel.data());
  BackendBuffer<uint32_t> dsel(kGpu, n);
  const size_t gpu_m = select_indices(kGpu, n, dflags.data(), false, dsel.data());
  ASSERT_EQ(gpu_m, cpu_m);
  EXPECT_EQ(to_host(dsel, gpu_m), std::vector<uint32_t>(cpu_sel.begin(), cpu_sel.begin() + cpu_m));
  std::vector<float> grads(n * 8, 0.5f);
  grads[17 * 8 + 3] = NAN;
  grads[2999 * 8 + 7] = -INFINITY;
  auto dgrads = to_gpu(grads);
  BackendBuffer<bool> bad(kGpu, n);
  EXPECT_EQ(flag_nonfinite_rows(kGpu, n, dgrads.data(), 8, 8, bad.data()), 2u);
}

TEST_F(OpsCudaParity, OptimizerRowsMatchCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const uint32_t dim = 70;  // not a multiple of 32
  const size_t n = 777;
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdaGrad,
        OptimizerKind::kRowWiseAdaGrad, OptimizerKind::kRmsProp, OptimizerKind::kFtrl}) {
    OptimizerOptions o;
    o.kind = kind;
    o.learning_rate = 0.05f;
    o.eps = 1e-6f;
    o.initial_accumulator = 0.1f;
    o.clip_norm = 2.0f;
    o.weight_decay = 0.01f;
    const uint32_t stride = dim + optimizer_state_dim(kind, dim);
    std::vector<float> rows(n * stride, 0.0f), grads(n * dim);
    for (size_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < dim; ++j) rows[i * stride + j] = normal(rng);
    }
    std::unique_ptr<bool[]> skip(new bool[n]);
    for (size_t i = 0; i < n; ++i) skip[i] = i % 11 == 0;
    auto drows = to_gpu(rows);
    BackendBuffer<bool> dskip(kGpu, n);
    dskip.upload(skip.get(), n);
    for (int step = 0; step < 5; ++step) {
      for (auto& g : grads) g = normal(rng);
      auto dgrads = to_gpu(grads);
      apply_optimizer_rows(Backend::kCpu, o, n, rows.data(), stride, grads.data(), dim, dim,
                           skip.get());
      apply_optimizer_rows(kGpu, o, n, drows.data(), stride, dgrads.data(), dim, dim, dskip.data());
    }
    const auto gpu_rows = to_host(drows, rows.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      ASSERT_NEAR(gpu_rows[k], rows[k], 1e-4f * (1 + std::abs(rows[k])))
          << to_string(kind) << " element " << k;
    }
  }
}

}  // namespace
}  // namespace dynemb

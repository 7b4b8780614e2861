// The ops on rows by address (LookupFeature::row_ptrs, apply_optimizer_row_ptrs, the guarded
// optimizer and resolve_missing_rows) against the dense ops on a dense copy of the same rows
// (null addresses: rows of zeros, not updated), on the CPU and, with a GPU, on CUDA. Fresh
// random inputs; some addresses null, some rows not 16-byte aligned. Results must be
// bit-identical to the dense path on the same backend (and pooling to the CPU's dense path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/backend_test.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "ops/backend_vectors.hpp"

namespace dynemb {
namespace {

using ops_test::download;
using ops_test::same_bits;
using ops_test::upload;

// num_rows rows of `width` floats placed in a storage buffer in shuffled order, each at an
// offset (in floats) of `place[r]`; misaligned rows start at an odd float. null[r]: no address.
struct ScatteredRows {
  uint32_t width = 0;
  std::vector<float> storage;  // host copy of the backend storage
  std::vector<size_t> place;   // row r's offset in storage
  std::vector<bool> null;      // row r has no address
  std::vector<float> dense;    // row r at r * width; zeros where null
};

ScatteredRows make_rows(std::mt19937_64& rng, size_t num_rows, uint32_t width, double p_null,
                        bool misalign) {
  ScatteredRows s;
  s.width = width;
  std::vector<size_t> order(num_rows);
  for (size_t r = 0; r < num_rows; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng);
  // Slots of width + 4 floats (16-byte multiples when width % 4 == 0); a misaligned row sits one
  // float into its slot.
  const size_t slot = (width + 4 + 3) / 4 * 4;
  s.storage.assign(num_rows * slot + 8, 0.0f);
  s.place.resize(num_rows);
  s.null.resize(num_rows);
  s.dense.assign(num_rows * width, 0.0f);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t r = 0; r < num_rows; ++r) {
    s.place[r] = order[r] * slot + (misalign && rng() % 3 == 0 ? 1 : 0);
    s.null[r] = u(rng) < p_null;
    for (uint32_t j = 0; j < width; ++j) {
      const float v = normal(rng);
      s.storage[s.place[r] + j] = v;
      if (!s.null[r]) s.dense[r * width + j] = v;
    }
  }
  return s;
}

// The addresses of the rows in backend storage at `base`.
std::vector<float*> addresses(const ScatteredRows& s, float* base) {
  std::vector<float*> p(s.place.size());
  for (size_t r = 0; r < p.size(); ++r) p[r] = s.null[r] ? nullptr : base + s.place[r];
  return p;
}

struct RandomBags {
  std::vector<uint32_t> indices;
  std::vector<int64_t> offsets{0};
  std::vector<float> weights;
};

RandomBags make_bags(std::mt19937_64& rng, size_t bags, int max_len, size_t num_rows) {
  RandomBags b;
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < bags; ++i) {
    const int len = static_cast<int>(rng() % (max_len + 1));
    for (int j = 0; j < len; ++j) {
      // A few hot rows and a long tail.
      const uint64_t r = rng();
      b.indices.push_back(static_cast<uint32_t>(r % 4 == 0 ? r % 3 : (r >> 8) % num_rows));
      b.weights.push_back(normal(rng));
    }
    b.offsets.push_back(static_cast<int64_t>(b.indices.size()));
  }
  return b;
}

class RowAddresses : public dynemb::testing::BackendTest {};

// Pools `bags` over rows given densely (rows + r * stride) or by address on `backend`.
std::vector<float> pool(Backend backend, const RandomBags& bags, PoolingMode mode, bool weighted,
                        uint32_t dim, uint32_t out_stride, const std::vector<float>* dense,
                        uint32_t dense_stride, const float* const* row_ptrs, size_t num_rows,
                        bool ahead = false) {
  auto indices = upload(backend, bags.indices);
  auto offsets = upload(backend, bags.offsets);
  auto weights = upload(backend, bags.weights);
  BackendBuffer<float> rows;
  LookupFeature f;
  if (dense != nullptr) {
    rows = upload(backend, *dense);
    f.rows = rows.data();
    f.row_stride = dense_stride;
  } else {
    f.row_ptrs = row_ptrs;
  }
  f.dim = dim;
  f.num_rows = num_rows;
  f.indices = indices.data();
  f.num_ids = bags.indices.size();
  f.offsets = offsets.data();
  f.num_bags = bags.offsets.size() - 1;
  f.weights = weighted ? weights.data() : nullptr;
  f.mode = mode;
  f.pool_ahead = ahead;
  const size_t out_rows = mode == PoolingMode::kNone ? f.num_ids : f.num_bags;
  const size_t out_floats = out_rows * out_stride;
  std::vector<float> host_out(out_floats, -7.0f);
  auto out = upload(backend, host_out);
  const LookupOutput o{out.data(), out_stride};
  pooled_lookup(backend, {&f, 1}, {&o, 1});
  backend_synchronize(backend);
  return download(out, out_floats);
}

TEST_P(RowAddresses, PoolingByAddressIsBitIdenticalToDense) {
  const Backend backend = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // float4-capable dims (one tile, a partial second tile) and an odd one; rows misaligned or not.
  for (const uint32_t dim : {128u, 200u, 37u}) {
    for (const bool misalign : {false, true}) {
      const size_t num_rows = 300;
      const ScatteredRows rows = make_rows(rng, num_rows, dim, 0.2, misalign);
      auto storage = upload(backend, rows.storage);
      auto ptrs = upload(backend, addresses(rows, storage.data()));
      const RandomBags bags = make_bags(rng, 150, 40, num_rows);
      const uint32_t out_stride = dim % 4 == 0 ? dim : dim + 3;
      for (const PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}) {
        for (const bool weighted : {false, true}) {
          SCOPED_TRACE("dim " + std::to_string(dim) + " misaligned " + std::to_string(misalign) +
                       " mode " + to_string(mode) + " weighted " + std::to_string(weighted));
          const auto by_address = pool(backend, bags, mode, weighted, dim, out_stride, nullptr, 0,
                                       ptrs.data(), num_rows);
          const auto dense_here = pool(backend, bags, mode, weighted, dim, out_stride, &rows.dense,
                                       dim, nullptr, num_rows);
          const auto dense_cpu = pool(Backend::kCpu, bags, mode, weighted, dim, out_stride,
                                      &rows.dense, dim, nullptr, num_rows);
          EXPECT_TRUE(same_bits(by_address, dense_here));
          EXPECT_TRUE(same_bits(by_address, dense_cpu));
          // An independent float64 check of one bag / id (the dense path has its own tests).
          const size_t b = 0;
          const int64_t begin = bags.offsets[b], end = bags.offsets[b + 1];
          for (uint32_t j = 0; j < dim && mode != PoolingMode::kNone && end > begin; j += 17) {
            double want = 0;
            for (int64_t i = begin; i < end; ++i) {
              const double w = weighted ? bags.weights[i] : 1.0;
              want += w * rows.dense[size_t{bags.indices[i]} * dim + j];
            }
            if (mode == PoolingMode::kMean) want /= static_cast<double>(end - begin);
            EXPECT_NEAR(by_address[j], want, 1e-4 * (1 + std::abs(want)));
          }
        }
      }
    }
  }
}

// Enough bags that each warp of a grid of resident blocks walks more than 32 of them (the GPU's
// pool_ahead_kernel, LookupFeature::pool_ahead, reloads its offsets every 32 bags), bags over 32
// ids, by address with and without pool_ahead against the CPU's dense pooling. GPU only (the
// CPU's by-address pooling is checked above, on fewer bags).
TEST_P(RowAddresses, PoolingManyBagsByAddressIsBitIdenticalToTheCpu) {
  const Backend backend = GetParam();
  if (backend != Backend::kCuda) GTEST_SKIP() << "the GPU's long-grid pooling";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const uint32_t dim : {128u, 36u}) {
    const size_t num_rows = 4000;
    const ScatteredRows rows = make_rows(rng, num_rows, dim, 0.1, false);
    auto storage = upload(backend, rows.storage);
    auto ptrs = upload(backend, addresses(rows, storage.data()));
    const RandomBags bags = make_bags(rng, dim == 128 ? 300000 : 40000, 40, num_rows);
    for (const PoolingMode mode : {PoolingMode::kSum, PoolingMode::kMean}) {
      const bool weighted = mode == PoolingMode::kMean;
      SCOPED_TRACE("dim " + std::to_string(dim) + " mode " + to_string(mode));
      const auto dense_cpu =
          pool(Backend::kCpu, bags, mode, weighted, dim, dim, &rows.dense, dim, nullptr, num_rows);
      for (const bool ahead : {false, true}) {
        const auto by_address =
            pool(backend, bags, mode, weighted, dim, dim, nullptr, 0, ptrs.data(), num_rows, ahead);
        EXPECT_TRUE(same_bits(by_address, dense_cpu)) << "ahead " << ahead;
      }
    }
  }
}

OptimizerOptions optimizer_case(OptimizerKind kind, bool clip) {
  OptimizerOptions o;
  o.kind = kind;
  o.learning_rate = 0.05f;
  o.eps = 1e-6f;
  o.initial_accumulator = 0.1f;
  o.ftrl_l1 = 0.01f;
  o.ftrl_l2 = 0.01f;
  if (clip) {
    o.clip_norm = 0.5f;
    o.weight_decay = 0.01f;
  }
  return o;
}

TEST_P(RowAddresses, OptimizerByAddressIsBitIdenticalToDense) {
  const Backend backend = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (const OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdaGrad,
        OptimizerKind::kRowWiseAdaGrad, OptimizerKind::kRmsProp, OptimizerKind::kFtrl}) {
    for (const uint32_t dim : {64u, 37u}) {
      for (const bool misalign : {false, true}) {
        for (const bool guarded : {false, true}) {
          SCOPED_TRACE(to_string(kind) + " dim " + std::to_string(dim) + " misaligned " +
                       std::to_string(misalign) + " guarded " + std::to_string(guarded));
          const OptimizerOptions o = optimizer_case(kind, rng() % 2 == 0);
          const uint32_t row_dim = dim + optimizer_state_dim(kind, dim);
          const size_t n = 257;
          ScatteredRows rows = make_rows(rng, n, row_dim, 0.2, misalign);
          // Valid state: non-negative accumulators, Adam's step count a small integer.
          for (size_t r = 0; r < n; ++r) {
            for (uint32_t j = dim; j < row_dim; ++j) {
              float& v = rows.storage[rows.place[r] + j];
              v = std::abs(v);
              if (kind == OptimizerKind::kAdam && j == 3 * dim) {
                const uint32_t step = static_cast<uint32_t>(rng() % 5);
                std::memcpy(&v, &step, sizeof v);
              }
              if (!rows.null[r]) rows.dense[r * row_dim + j] = v;
            }
          }
          std::vector<float> grads(n * dim);
          for (auto& g : grads) g = normal(rng);
          std::unique_ptr<bool[]> skip(new bool[n]), dense_skip(new bool[n]);
          for (size_t r = 0; r < n; ++r) {
            skip[r] = rng() % 7 == 0;
            dense_skip[r] = skip[r] || rows.null[r];
          }
          if (guarded) grads[5 * dim + 1] = std::numeric_limits<float>::quiet_NaN();
          if (guarded) grads[9 * dim] = std::numeric_limits<float>::infinity();

          auto storage = upload(backend, rows.storage);
          auto ptrs = upload(backend, addresses(rows, storage.data()));
          auto dense = upload(backend, rows.dense);
          auto g = upload(backend, grads);
          auto sk = upload(backend, std::vector<uint8_t>(skip.get(), skip.get() + n));
          auto dsk = upload(backend, std::vector<uint8_t>(dense_skip.get(), dense_skip.get() + n));
          auto counts = upload(backend, std::vector<uint64_t>{0, 0});
          const bool* skip_dev = reinterpret_cast<const bool*>(sk.data());
          const bool* dense_skip_dev = reinterpret_cast<const bool*>(dsk.data());
          if (guarded) {
            ops::detail::apply_optimizer_row_ptrs_guarded(backend, o, n, ptrs.data(), g.data(), dim,
                                                          dim, skip_dev, counts.data(), nullptr);
            ops::detail::apply_optimizer_rows_guarded(backend, o, n, dense.data(), row_dim,
                                                      g.data(), dim, dim, dense_skip_dev,
                                                      counts.data() + 1, nullptr);
          } else {
            apply_optimizer_row_ptrs(backend, o, n, ptrs.data(), g.data(), dim, dim, skip_dev);
            apply_optimizer_rows(backend, o, n, dense.data(), row_dim, g.data(), dim, dim,
                                 dense_skip_dev);
          }
          backend_synchronize(backend);
          const auto got = download(storage, rows.storage.size());
          const auto want = download(dense, rows.dense.size());
          for (size_t r = 0; r < n; ++r) {
            const float* a = got.data() + rows.place[r];
            if (rows.null[r]) {
              // Not reachable by address: left as it was.
              ASSERT_EQ(std::memcmp(a, rows.storage.data() + rows.place[r], row_dim * 4), 0)
                  << "row " << r;
            } else {
              ASSERT_EQ(std::memcmp(a, want.data() + r * row_dim, row_dim * 4), 0) << "row " << r;
            }
          }
          if (guarded) {
            const auto c = download(counts, 2);
            EXPECT_EQ(c[0], 2u);
            EXPECT_EQ(c[1], 2u);
          }
        }
      }
    }
  }
}

TEST_P(RowAddresses, MissingRowsPointAtTheFallbackAndAreCounted) {
  const Backend backend = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 1000;
  const uint32_t width = 8;
  BackendBuffer<float> table_rows(backend, n * width), fallback(backend, n * width);
  std::vector<float*> ptrs(n);
  std::vector<uint8_t> founds(n);
  uint64_t want_missing = 0, want_created = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool none = rng() % 5 == 0;
    founds[i] = rng() % 2;
    ptrs[i] = none ? nullptr : table_rows.data() + i * width;
    want_missing += none;
    want_created += !none && !founds[i];
  }
  for (const uint32_t stride : {0u, width}) {
    auto p = upload(backend, ptrs);
    auto f = upload(backend, founds);
    BackendBuffer<uint8_t> missing(backend, n);
    auto counts = upload(backend, std::vector<uint64_t>{5, 9});
    ops::detail::resolve_missing_rows(
        backend, n, p.data(), reinterpret_cast<bool*>(missing.data()), fallback.data(), stride,
        reinterpret_cast<const bool*>(f.data()), counts.data(), counts.data() + 1, nullptr);
    backend_synchronize(backend);
    const auto got = download(p, n);
    const auto flags = download(missing, n);
    const auto c = download(counts, 2);
    EXPECT_EQ(c[0], 5 + want_created);
    EXPECT_EQ(c[1], 9 + want_missing);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(flags[i] != 0, ptrs[i] == nullptr) << i;
      EXPECT_EQ(got[i], ptrs[i] != nullptr ? ptrs[i] : fallback.data() + i * stride) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RowAddresses, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

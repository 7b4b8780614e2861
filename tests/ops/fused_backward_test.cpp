// The gradient reduction fused with the optimizer (detail::reduce_and_optimize_row_ptrs) against
// the two passes it replaces (reduce_gradients_grouped, then apply_optimizer_row_ptrs[_guarded])
// on the same backend, bit for bit, over many steps of fresh random bags with repeated and hot
// keys (rows of several gradient chunks), every optimizer, SUM / MEAN / NONE pooling with and
// without weights, skipped and address-less rows, NaN / Inf gradients in guarded mode, dims on
// the float4, scalar and wide (over detail::kFusedMaxDim) paths. SGD rows are checked against a
// float64 sum of the gradients; with a GPU, its rows are checked against the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"
#include "dynemb/ops/step_ops.hpp"
#include "ops/backend_vectors.hpp"
#include "ops/ids_by_row.hpp"

namespace dynemb {
namespace {

using ops_test::download;
using ops_test::same_bits;
using ops_test::upload;

constexpr OptimizerKind kKinds[] = {OptimizerKind::kSgd,     OptimizerKind::kAdam,
                                    OptimizerKind::kAdaGrad, OptimizerKind::kRowWiseAdaGrad,
                                    OptimizerKind::kRmsProp, OptimizerKind::kFtrl};

// One step's inputs on the host: bags over `num_rows` rows (row 0 very hot, row 1 warm), the ids
// grouped by row (a stable counting sort) and their bags in that order, bag (or id) gradients,
// skip flags.
struct StepInput {
  std::vector<uint32_t> indices;
  std::vector<int64_t> offsets{0};
  std::vector<float> weights;
  std::vector<uint32_t> ids_by_row, row_begin, bag_by_row;
  std::vector<float> grads;
  uint32_t grad_stride = 0;
  std::vector<uint8_t> skip;
};

StepInput make_step(std::mt19937_64& rng, size_t num_rows, size_t bags, uint32_t dim,
                    PoolingMode mode, bool poison) {
  StepInput s;
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t b = 0; b < bags; ++b) {
    const int len = static_cast<int>(rng() % 9);
    for (int j = 0; j < len; ++j) {
      const double p = u(rng);
      const uint32_t row = p < 0.25 ? 0 : p < 0.3 ? 1 : static_cast<uint32_t>(rng() % num_rows);
      s.indices.push_back(row);
      s.weights.push_back(normal(rng));
    }
    s.offsets.push_back(static_cast<int64_t>(s.indices.size()));
  }
  const size_t n = s.indices.size();
  ops_test::group_setup_ids_by_row(s, num_rows);
  // A stride that is not a multiple of 4 half of the time: the gradient rows then take the
  // scalar path.
  s.grad_stride = dim + (rng() % 2 == 0 ? 0 : 1);
  const size_t out_rows = mode == PoolingMode::kNone ? n : bags;
  s.grads.resize(out_rows * s.grad_stride + 1);
  for (auto& g : s.grads) g = normal(rng);
  if (poison && n > 0) {
    // The gradient rows of two random ids (their bags' for SUM / MEAN): some row reads them.
    auto out_row_of_some_id = [&] {
      const size_t i = rng() % n;
      if (mode == PoolingMode::kNone) return i;
      return static_cast<size_t>(
          std::upper_bound(s.offsets.begin(), s.offsets.end(), static_cast<int64_t>(i)) -
          s.offsets.begin() - 1);
    };
    s.grads[out_row_of_some_id() * s.grad_stride + rng() % dim] =
        std::numeric_limits<float>::quiet_NaN();
    s.grads[out_row_of_some_id() * s.grad_stride] = std::numeric_limits<float>::infinity();
  }
  s.skip.resize(num_rows);
  for (auto& f : s.skip) f = u(rng) < 0.1;
  return s;
}

// Rows of `row_dim` floats in a storage buffer, in shuffled slots; some rows start one float into
// their slot (not 16-byte aligned); some have no address.
struct RowStore {
  uint32_t row_dim = 0;
  std::vector<float> storage;
  std::vector<size_t> place;
  std::vector<bool> null;
};

RowStore make_store(std::mt19937_64& rng, size_t num_rows, uint32_t dim, uint32_t row_dim) {
  RowStore s;
  s.row_dim = row_dim;
  const size_t slot = (row_dim + 4 + 3) / 4 * 4;
  s.storage.assign(num_rows * slot + 8, 0.0f);
  std::vector<size_t> order(num_rows);
  for (size_t r = 0; r < num_rows; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng);
  std::normal_distribution<float> normal;
  s.place.resize(num_rows);
  s.null.resize(num_rows);
  for (size_t r = 0; r < num_rows; ++r) {
    s.place[r] = order[r] * slot + (rng() % 4 == 0 ? 1 : 0);
    s.null[r] = r > 1 && rng() % 20 == 0;
    for (uint32_t j = 0; j < dim; ++j) s.storage[s.place[r] + j] = normal(rng);  // state: 0
  }
  return s;
}

// The storage and its addresses in one backend's memory.
struct BackendRows {
  BackendBuffer<float> storage;
  BackendBuffer<float*> ptrs;
};

BackendRows to_backend(Backend backend, const RowStore& s) {
  BackendRows b;
  b.storage = upload(backend, s.storage);
  std::vector<float*> p(s.place.size());
  for (size_t r = 0; r < p.size(); ++r) p[r] = s.null[r] ? nullptr : b.storage.data() + s.place[r];
  b.ptrs = upload(backend, p);
  return b;
}

// One step's inputs in one backend's memory.
struct BackendStep {
  BackendBuffer<uint32_t> indices, ids_by_row, row_begin, bag_by_row;
  BackendBuffer<int64_t> offsets;
  BackendBuffer<float> weights, grads;
  BackendBuffer<bool> skip;
  LookupFeature feature;
  LookupOutput g;
  ops::detail::IdGroups groups;
};

std::unique_ptr<BackendStep> to_backend(Backend backend, const StepInput& in, size_t num_rows,
                                        uint32_t dim, PoolingMode mode, bool weighted,
                                        const float* const* row_ptrs) {
  auto s = std::make_unique<BackendStep>();
  s->indices = upload(backend, in.indices);
  s->ids_by_row = upload(backend, in.ids_by_row);
  s->row_begin = upload(backend, in.row_begin);
  s->bag_by_row = upload(backend, in.bag_by_row);
  s->offsets = upload(backend, in.offsets);
  s->weights = upload(backend, in.weights);
  s->grads = upload(backend, in.grads);
  std::vector<uint8_t> skip_bytes = in.skip;
  s->skip = BackendBuffer<bool>(backend, num_rows + 1);
  copy_to_backend(backend, s->skip.data(), skip_bytes.data(), num_rows);
  LookupFeature& f = s->feature;
  f.row_ptrs = row_ptrs;
  f.dim = dim;
  f.num_rows = num_rows;
  f.indices = s->indices.data();
  f.num_ids = in.indices.size();
  f.offsets = s->offsets.data();
  f.num_bags = in.offsets.size() - 1;
  f.weights = weighted ? s->weights.data() : nullptr;
  f.mode = mode;
  s->g = {s->grads.data(), in.grad_stride};
  s->groups = {s->ids_by_row.data(), s->row_begin.data()};
  return s;
}

class FusedBackward : public dynemb::testing::BackendTest {};

TEST_P(FusedBackward, BitIdenticalToReduceThenOptimizeOverManySteps) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed; failures show DYNEMB_TEST_SEED
  std::mt19937_64& rng = test_rng.engine();
  const size_t num_rows = 300, bags = 400;
  // float4 over one tile, float4 over two tiles with a partial one, scalar, wider than the
  // on-chip path.
  for (const uint32_t dim : {128u, 132u, 13u, ops::detail::kFusedMaxDim + 4}) {
    for (const OptimizerKind kind : kKinds) {
      if (dim > ops::detail::kFusedMaxDim && kind != OptimizerKind::kAdam) continue;
      const PoolingMode mode =
          std::array{PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}[rng() % 3];
      const bool weighted = rng() % 2 == 0, guarded = rng() % 3 != 0;
      OptimizerOptions o;
      o.kind = kind;
      o.learning_rate = 0.05f;
      o.eps = 1e-6f;
      o.initial_accumulator = rng() % 2 == 0 ? 0.0f : 0.1f;
      o.ftrl_l1 = 0.01f;
      o.ftrl_l2 = 0.01f;
      if (kind != OptimizerKind::kSgd) {
        o.weight_decay = rng() % 2 == 0 ? 0.0f : 0.01f;
        o.clip_norm = rng() % 2 == 0 ? 0.0f : 1.0f;
        o.clip_value = rng() % 3 == 0 ? 0.5f : 0.0f;
      }
      SCOPED_TRACE("dim " + std::to_string(dim) + " " + to_string(kind) + " " + to_string(mode) +
                   (weighted ? " weighted" : "") + (guarded ? " guarded" : "") + " weight_decay " +
                   std::to_string(o.weight_decay) + " clip_norm " + std::to_string(o.clip_norm) +
                   " clip_value " + std::to_string(o.clip_value));
      const uint32_t row_dim = dim + optimizer_state_dim(kind, dim);
      const RowStore store = make_store(rng, num_rows, dim, row_dim);
      BackendRows two_pass = to_backend(backend, store), fused = to_backend(backend, store);
      BackendRows cpu_fused = to_backend(Backend::kCpu, store);
      BackendBuffer<float> row_grads(backend, num_rows * dim);
      BackendBuffer<uint64_t> counters = upload(backend, std::vector<uint64_t>{0, 0});
      uint64_t cpu_counter = 0;
      ops::detail::StepWorkspace workspace(backend, 0), cpu_workspace(Backend::kCpu, 0);
      for (int step = 0; step < 6; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const StepInput in = make_step(rng, num_rows, bags, dim, mode, guarded && step % 2 == 1);
        const std::vector<float> before = download(fused.storage, store.storage.size());
        const auto s = to_backend(backend, in, num_rows, dim, mode, weighted, fused.ptrs.data());
        uint64_t* counter = counters.data();
        ops::detail::reduce_gradients_grouped(backend, s->feature, s->groups, s->g,
                                              {row_grads.data(), dim}, nullptr);
        if (guarded) {
          ops::detail::apply_optimizer_row_ptrs_guarded(backend, o, num_rows, two_pass.ptrs.data(),
                                                        row_grads.data(), dim, dim, s->skip.data(),
                                                        counter, nullptr);
        } else {
          apply_optimizer_row_ptrs(backend, o, num_rows, two_pass.ptrs.data(), row_grads.data(),
                                   dim, dim, s->skip.data(), nullptr);
        }
        // Every other step the fused pass is given the bags in grouped order (as the training
        // step's dedup gives them) instead of working them out.
        ops::detail::IdGroups fused_groups = s->groups;
        if (step % 2 == 0 && mode != PoolingMode::kNone)
          fused_groups.bag_by_row = s->bag_by_row.data();
        ops::detail::reduce_and_optimize_row_ptrs(
            backend, o, s->feature, fused_groups, s->g, fused.ptrs.data(), s->skip.data(),
            guarded ? counter + 1 : nullptr, workspace, nullptr);
        backend_synchronize(backend);
        const std::vector<float> got = download(fused.storage, store.storage.size());
        ASSERT_TRUE(same_bits(got, download(two_pass.storage, store.storage.size())));
        const std::vector<uint64_t> counts = download(counters, 2);
        EXPECT_EQ(counts[0], counts[1]);
        if (guarded && step % 2 == 1) EXPECT_GT(counts[1], 0u) << "a poisoned step counts rows";

        // Without a GPU this compares the CPU with itself; with one, the GPU with the CPU.
        const auto c =
            to_backend(Backend::kCpu, in, num_rows, dim, mode, weighted, cpu_fused.ptrs.data());
        ops::detail::reduce_and_optimize_row_ptrs(
            Backend::kCpu, o, c->feature, c->groups, c->g, cpu_fused.ptrs.data(), c->skip.data(),
            guarded ? &cpu_counter : nullptr, cpu_workspace, nullptr);
        const std::vector<float> cpu = download(cpu_fused.storage, store.storage.size());
        for (size_t k = 0; k < cpu.size(); ++k) {
          if (std::isnan(cpu[k])) {
            ASSERT_TRUE(std::isnan(got[k])) << "float " << k;
          } else {
            ASSERT_NEAR(got[k], cpu[k], 1e-4 * (1 + std::abs(cpu[k]))) << "float " << k;
          }
        }
        EXPECT_EQ(cpu_counter, counts[1]);

        // SGD: w - lr * (float64 gradient) for the rows updated; the others unchanged.
        if (kind != OptimizerKind::kSgd) continue;
        for (size_t r = 0; r < num_rows; ++r) {
          if (store.null[r]) continue;
          const std::vector<double> g =
              ops_test::gradient64(in, r, dim, mode, weighted, [](float v) { return v; });
          bool finite = true;
          for (double v : g) finite &= std::isfinite(v);
          if (!finite && !guarded) continue;  // NaN rows, compared with the CPU above
          const bool updated = finite && !in.skip[r];
          for (uint32_t j = 0; j < dim; ++j) {
            const double w = before[store.place[r] + j];
            const double expected = updated ? w - o.learning_rate * g[j] : w;
            ASSERT_NEAR(got[store.place[r] + j], expected, 1e-4 * (1 + std::abs(expected)))
                << "row " << r << " element " << j;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, FusedBackward, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

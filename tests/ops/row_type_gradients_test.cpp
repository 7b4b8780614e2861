// The backward reads each output-gradient element as float32 whatever the rows' type:
// reduce_gradients_grouped against a float64 sum of the float32 gradients (told apart from the
// sum of bfloat16-rounded ones); the fused reduction and optimizer on
// bfloat16 rows bit-identical to the two passes it replaces; and, with a GPU, the GPU
// bit-identical to the CPU in both. Fresh random bags with a hot row (several gradient chunks),
// SUM / MEAN / NONE, with and without weights, dims on the float4 and scalar paths.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/memory.hpp"
#include "dynemb/core/value_type.hpp"
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

// One batch on the host: bags over num_rows rows (row 0 read by about a third of the ids: a hot
// row of several chunks), the ids grouped by row, gradients of one row per bag (NONE: per id).
struct Batch {
  std::vector<uint32_t> indices, ids_by_row, row_begin, bag_by_row;
  std::vector<int64_t> offsets{0};
  std::vector<float> weights, grads;
  uint32_t grad_stride = 0;
};

Batch make_batch(std::mt19937_64& rng, size_t num_rows, size_t bags, uint32_t dim,
                 PoolingMode mode) {
  Batch s;
  std::normal_distribution<float> normal;
  for (size_t b = 0; b < bags; ++b) {
    const int len = static_cast<int>(rng() % 7);
    for (int j = 0; j < len; ++j) {
      s.indices.push_back(rng() % 3 == 0 ? 0 : static_cast<uint32_t>(rng() % num_rows));
      s.weights.push_back(normal(rng));
    }
    s.offsets.push_back(static_cast<int64_t>(s.indices.size()));
  }
  const size_t n = s.indices.size();
  ops_test::group_setup_ids_by_row(s, num_rows);
  s.grad_stride = dim + static_cast<uint32_t>(rng() % 2);  // odd strides take the scalar path
  const size_t out_rows = mode == PoolingMode::kNone ? n : bags;
  s.grads.resize(out_rows * s.grad_stride + 1);
  for (auto& g : s.grads) g = normal(rng);
  return s;
}

// A batch in one backend's memory, as a feature over `rows` (row_ptrs: by address) of `type`.
struct Device {
  BackendBuffer<uint32_t> indices, ids_by_row, row_begin, bag_by_row;
  BackendBuffer<int64_t> offsets;
  BackendBuffer<float> weights, grads, dense;
  LookupFeature x;
  LookupOutput g;
  ops::detail::IdGroups groups;

  Device(Backend backend, const Batch& in, size_t num_rows, uint32_t dim, PoolingMode mode,
         bool weighted, ValueType type, const float* const* row_ptrs, bool with_bags)
      : indices(upload(backend, in.indices)),
        ids_by_row(upload(backend, in.ids_by_row)),
        row_begin(upload(backend, in.row_begin)),
        bag_by_row(upload(backend, in.bag_by_row)),
        offsets(upload(backend, in.offsets)),
        weights(upload(backend, in.weights)),
        grads(upload(backend, in.grads)),
        dense(backend, num_rows * value_words(type, dim) + 1) {
    x.rows = row_ptrs == nullptr ? dense.data() : nullptr;
    x.row_stride = value_words(type, dim);
    x.row_ptrs = row_ptrs;
    x.dim = dim;
    x.num_rows = num_rows;
    x.indices = indices.data();
    x.num_ids = in.indices.size();
    x.offsets = offsets.data();
    x.num_bags = in.offsets.size() - 1;
    x.weights = weighted ? weights.data() : nullptr;
    x.mode = mode;
    x.value_type = type;
    g = {grads.data(), in.grad_stride};
    groups = {ids_by_row.data(), row_begin.data(),
              with_bags && mode != PoolingMode::kNone ? bag_by_row.data() : nullptr};
  }
};

class RowTypeGradients : public dynemb::testing::BackendTest {};

TEST_P(RowTypeGradients, ReductionOfEveryRowTypeSumsFloat32Gradients) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed
  std::mt19937_64& rng = test_rng.engine();
  const size_t num_rows = 60, bags = 500;
  for (const uint32_t dim : {128u, 13u}) {
    for (const ValueType type : {ValueType::kBFloat16, ValueType::kFloat32, ValueType::kFloat16}) {
      const PoolingMode mode =
          std::array{PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}[rng() % 3];
      const bool weighted = rng() % 2 == 0;
      SCOPED_TRACE("dim " + std::to_string(dim) + " " + to_string(type) + " " + to_string(mode) +
                   (weighted ? " weighted" : ""));
      const Batch in = make_batch(rng, num_rows, bags, dim, mode);
      Device d(backend, in, num_rows, dim, mode, weighted, type, nullptr, false);
      BackendBuffer<float> out(backend, num_rows * dim);
      ops::detail::reduce_gradients_grouped(backend, d.x, d.groups, d.g, {out.data(), dim},
                                            nullptr);
      backend_synchronize(backend);
      const std::vector<float> got = download(out, num_rows * dim);
      size_t told_apart = 0;
      for (size_t r = 0; r < num_rows; ++r) {
        const auto g16 = ops_test::gradient64(
            in, r, dim, mode, weighted, [](float v) { return round_to<ValueType::kBFloat16>(v); });
        const auto g32 =
            ops_test::gradient64(in, r, dim, mode, weighted, [](float v) { return v; });
        for (uint32_t j = 0; j < dim; ++j) {
          const double want = g32[j];
          const double tol = 2e-5 * (1 + std::abs(want)) * (1 + in.row_begin[r + 1] / 64.0);
          ASSERT_NEAR(got[r * dim + j], want, tol) << "row " << r << " element " << j;
          if (std::abs(g16[j] - g32[j]) > 10 * tol) ++told_apart;
        }
      }
      // The float32 and bfloat16 readings differ by more than the tolerance somewhere: the check
      // above tells the reduction read float32.
      EXPECT_GT(told_apart, 0u);

      // Without a GPU this compares the CPU with itself; with one, the GPU with the CPU.
      Device c(Backend::kCpu, in, num_rows, dim, mode, weighted, type, nullptr, false);
      std::vector<float> cpu(num_rows * dim);
      ops::detail::reduce_gradients_grouped(Backend::kCpu, c.x, c.groups, c.g, {cpu.data(), dim},
                                            nullptr);
      ASSERT_TRUE(same_bits(got, cpu));
    }
  }
}

// bfloat16 rows of `dim` elements (random values) and AdaGrad (state in float32; not Adam, whose
// bias corrections call each platform's powf): the fused pass against the two passes on the
// backend, the GPU against the CPU, bit for bit.
// The fused pass on 16-bit rows (the GPU's cold rows then run in a kernel of their own, with its
// own launch shape) against the two passes it replaces and against the CPU: bfloat16 rows with
// AdaGrad, float16 and bfloat16 rows with Adam, and bfloat16 rows with bfloat16 Adam state.
TEST_P(RowTypeGradients, FusedBackwardOn16BitRowsMatchesTwoPasses) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed
  std::mt19937_64& rng = test_rng.engine();
  const size_t num_rows = 80, bags = 600;
  struct Case {
    ValueType type;
    OptimizerKind kind;
    bool state16;
  };
  for (const Case k : {Case{ValueType::kBFloat16, OptimizerKind::kAdaGrad, false},
                       Case{ValueType::kFloat16, OptimizerKind::kAdam, false},
                       Case{ValueType::kBFloat16, OptimizerKind::kAdam, false},
                       Case{ValueType::kBFloat16, OptimizerKind::kAdam, true}}) {
    OptimizerOptions o;
    o.kind = k.kind;
    o.learning_rate = 0.05f;
    o.value_type = k.type;
    o.state_in_value_type = k.state16;
    for (const uint32_t dim : {128u, 13u}) {
      const uint32_t words = value_words(k.type, dim);
      const uint32_t row_words = words + optimizer_state_words(o.kind, dim, state_value_type(o));
      const size_t slot = (row_words + 3) / 4 * 4;  // 16-byte aligned rows
      std::vector<float> storage(num_rows * slot, 0.0f);
      std::normal_distribution<float> normal;
      for (size_t r = 0; r < num_rows; ++r) {
        for (uint32_t j = 0; j < dim; ++j) store_value(k.type, &storage[r * slot], j, normal(rng));
      }
      const auto addresses = [&](BackendBuffer<float>& s) {
        std::vector<float*> p(num_rows);
        for (size_t r = 0; r < num_rows; ++r) p[r] = s.data() + r * slot;
        return p;
      };
      BackendBuffer<float> two = upload(backend, storage), fused = upload(backend, storage);
      BackendBuffer<float> cpu_fused = upload(Backend::kCpu, storage);
      BackendBuffer<float*> two_ptrs = upload(backend, addresses(two));
      BackendBuffer<float*> fused_ptrs = upload(backend, addresses(fused));
      BackendBuffer<float*> cpu_ptrs = upload(Backend::kCpu, addresses(cpu_fused));
      BackendBuffer<float> row_grads(backend, num_rows * dim);
      ops::detail::StepWorkspace workspace(backend, 0), cpu_workspace(Backend::kCpu, 0);
      for (int step = 0; step < 4; ++step) {
        const PoolingMode mode =
            std::array{PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}[rng() % 3];
        const bool weighted = rng() % 2 == 0;
        SCOPED_TRACE(to_string(k.type) + " " + to_string(k.kind) +
                     (k.state16 ? " 16-bit state" : "") + " dim " + std::to_string(dim) + " step " +
                     std::to_string(step) + " " + to_string(mode) + (weighted ? " weighted" : ""));
        const Batch in = make_batch(rng, num_rows, bags, dim, mode);
        // Every other step the bags come in grouped order (as the training step's dedup gives
        // them), which lets the GPU run the hot rows beside the cold ones.
        const bool with_bags = step % 2 == 0;
        Device d(backend, in, num_rows, dim, mode, weighted, k.type, fused_ptrs.data(), with_bags);
        ops::detail::reduce_gradients_grouped(backend, d.x, d.groups, d.g, {row_grads.data(), dim},
                                              nullptr);
        apply_optimizer_row_ptrs(backend, o, num_rows, two_ptrs.data(), row_grads.data(), dim, dim,
                                 nullptr, nullptr);
        ops::detail::reduce_and_optimize_row_ptrs(backend, o, d.x, d.groups, d.g, fused_ptrs.data(),
                                                  nullptr, nullptr, workspace, nullptr);
        backend_synchronize(backend);
        const std::vector<float> got = download(fused, storage.size());
        ASSERT_TRUE(same_bits(got, download(two, storage.size())));
        // Adam's bias corrections use powf, which the host and the GPU round apart.
        if (k.kind == OptimizerKind::kAdam && backend != Backend::kCpu) continue;
        Device c(Backend::kCpu, in, num_rows, dim, mode, weighted, k.type, cpu_ptrs.data(),
                 with_bags);
        ops::detail::reduce_and_optimize_row_ptrs(Backend::kCpu, o, c.x, c.groups, c.g,
                                                  cpu_ptrs.data(), nullptr, nullptr, cpu_workspace,
                                                  nullptr);
        ASSERT_TRUE(same_bits(got, download(cpu_fused, storage.size())));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RowTypeGradients, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

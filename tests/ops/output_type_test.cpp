// 16-bit outputs and gradients for 16-bit rows (LookupOutput::type): the pooled output is the
// float32 sum rounded once to the rows' type (checked against the float32-output op and a float64
// reference); the backward reading 16-bit gradients sums exactly what it sums reading their float32
// values (the reduction, and the fused reduction + optimizer: hot rows of several chunks, bags in
// grouped order and not); with a GPU, the GPU bit-identical to the CPU in each; and mismatched
// types or short strides refused by name. Fresh random bags, SUM / MEAN / NONE, weighted or not,
// dims on the 4-wide and scalar paths.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/backend_test.hpp"
#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
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

// A batch on the host: bags over num_rows rows (row 0 read by about a third of the ids: a hot row
// of several chunks), its ids grouped by row, and output gradients (one row per bag; NONE: per
// id) as 16-bit elements of `type` packed in words (grads16, stride words16) and as their exact
// float32 values (grads32, stride dim).
struct Batch {
  std::vector<uint32_t> indices, ids_by_row, row_begin, bag_by_row;
  std::vector<int64_t> offsets{0};
  std::vector<float> weights, grads16, grads32;
  uint32_t words16 = 0;
};

Batch make_batch(std::mt19937_64& rng, size_t num_rows, size_t bags, uint32_t dim, PoolingMode mode,
                 ValueType type) {
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
  ops_test::group_setup_ids_by_row(s, num_rows);
  const size_t out_rows = mode == PoolingMode::kNone ? s.indices.size() : bags;
  // One spare word on some draws: rows that do not start 8-byte aligned take the loads' fallback.
  s.words16 = value_words(type, dim) + static_cast<uint32_t>(rng() % 2);
  s.grads16.assign(out_rows * s.words16 + 1, 0.0f);
  s.grads32.assign(out_rows * dim + 1, 0.0f);
  for (size_t r = 0; r < out_rows; ++r) {
    for (uint32_t j = 0; j < dim; ++j) {
      store_value(type, &s.grads16[r * s.words16], j, normal(rng));
      s.grads32[r * dim + j] = load_value(type, &s.grads16[r * s.words16], j);
    }
  }
  return s;
}

// A batch in one backend's memory as a feature over rows of `type` (by address when row_ptrs).
struct Device {
  BackendBuffer<uint32_t> indices, ids_by_row, row_begin, bag_by_row;
  BackendBuffer<int64_t> offsets;
  BackendBuffer<float> weights, grads16, grads32;
  LookupFeature x;
  LookupOutput g16, g32;
  ops::detail::IdGroups groups;

  Device(Backend backend, const Batch& in, const float* rows, const float* const* row_ptrs,
         uint32_t row_stride, size_t num_rows, uint32_t dim, PoolingMode mode, bool weighted,
         ValueType type, bool with_bags)
      : indices(upload(backend, in.indices)),
        ids_by_row(upload(backend, in.ids_by_row)),
        row_begin(upload(backend, in.row_begin)),
        bag_by_row(upload(backend, in.bag_by_row)),
        offsets(upload(backend, in.offsets)),
        weights(upload(backend, in.weights)),
        grads16(upload(backend, in.grads16)),
        grads32(upload(backend, in.grads32)) {
    x.rows = row_ptrs == nullptr ? rows : nullptr;
    x.row_stride = row_stride;
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
    g16 = {grads16.data(), in.words16, type};
    g32 = {grads32.data(), dim, ValueType::kFloat32};
    groups = {ids_by_row.data(), row_begin.data(),
              with_bags && mode != PoolingMode::kNone ? bag_by_row.data() : nullptr};
  }
};

// num_rows random rows of `type`, `slot` words apart.
std::vector<float> random_rows(std::mt19937_64& rng, size_t num_rows, size_t slot, uint32_t dim,
                               ValueType type) {
  std::vector<float> storage(num_rows * slot, 0.0f);
  std::normal_distribution<float> normal;
  for (size_t r = 0; r < num_rows; ++r) {
    for (uint32_t j = 0; j < dim; ++j) store_value(type, &storage[r * slot], j, normal(rng));
  }
  return storage;
}

// Half a unit in the last place of `type` at |v|, in float64 (subnormals: half their spacing).
double half_ulp(ValueType type, double v) {
  const int mantissa = type == ValueType::kBFloat16 ? 7 : 10;
  const int min_exponent = type == ValueType::kBFloat16 ? -126 : -14;
  const int e = std::max(std::ilogb(std::max(std::abs(v), 1e-300)), min_exponent);
  return std::ldexp(1.0, e - mantissa - 1);
}

class OutputType : public dynemb::testing::BackendTest {};

// The pooled 16-bit output is the float32 output rounded once to nearest even, and within half a
// unit (plus the float32 sum's own rounding) of the float64 sum of the rows.
TEST_P(OutputType, PooledHalfOutputIsTheFloat32SumRoundedOnce) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed
  std::mt19937_64& rng = test_rng.engine();
  const size_t num_rows = 70, bags = 400;
  for (const ValueType type : {ValueType::kBFloat16, ValueType::kFloat16}) {
    for (const uint32_t dim : {128u, 13u, 36u}) {
      const PoolingMode mode =
          std::array{PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}[rng() % 3];
      const bool weighted = rng() % 2 == 0;
      const bool by_address = rng() % 2 == 0;
      SCOPED_TRACE(to_string(type) + " dim " + std::to_string(dim) + " " + to_string(mode) +
                   (weighted ? " weighted" : "") + (by_address ? " by address" : ""));
      const uint32_t words = value_words(type, dim);
      const std::vector<float> storage = random_rows(rng, num_rows, words, dim, type);
      const Batch in = make_batch(rng, num_rows, bags, dim, mode, type);
      const size_t out_rows = mode == PoolingMode::kNone ? in.indices.size() : bags;
      const auto pooled = [&](Backend on, ValueType out_type, uint32_t stride) {
        BackendBuffer<float> rows = upload(on, storage);
        std::vector<float*> p(num_rows);
        for (size_t r = 0; r < num_rows; ++r) p[r] = rows.data() + r * words;
        BackendBuffer<float*> ptrs = upload(on, p);
        Device d(on, in, rows.data(), by_address ? ptrs.data() : nullptr, words, num_rows, dim,
                 mode, weighted, type, false);
        // Filled with a pattern first: the words' padding halves must be left as they are.
        std::vector<float> fill(out_rows * stride + 1);
        for (size_t i = 0; i < fill.size(); ++i) fill[i] = static_cast<float>(i % 97);
        BackendBuffer<float> out = upload(on, fill);
        const LookupOutput o{out.data(), stride, out_type};
        pooled_lookup(on, {&d.x, 1}, {&o, 1});
        backend_synchronize(on);
        return download(out, fill.size());
      };
      const uint32_t stride16 = words + static_cast<uint32_t>(rng() % 2);
      const std::vector<float> out16 = pooled(backend, type, stride16);
      const std::vector<float> out32 = pooled(backend, ValueType::kFloat32, dim);
      size_t checked = 0;
      for (size_t b = 0; b < out_rows; ++b) {
        const float* got = &out16[b * stride16];
        for (uint32_t j = 0; j < dim; ++j) {
          const float f32 = out32[b * dim + j];
          const uint16_t bits = reinterpret_cast<const uint16_t*>(got)[j];
          const uint16_t want = type == ValueType::kBFloat16 ? to_bits16<ValueType::kBFloat16>(f32)
                                                             : to_bits16<ValueType::kFloat16>(f32);
          ASSERT_EQ(bits, want) << "output " << b << " element " << j << " (float32 " << f32 << ")";
          // The float64 reference: the same bag summed exactly.
          double ref = 0, mag = 0;
          const int64_t first =
              mode == PoolingMode::kNone ? static_cast<int64_t>(b) : in.offsets[b];
          const int64_t last = mode == PoolingMode::kNone ? first + 1 : in.offsets[b + 1];
          for (int64_t i = first; i < last; ++i) {
            double f = weighted ? in.weights[i] : 1.0;
            if (mode == PoolingMode::kMean) f /= static_cast<double>(last - first);
            const double v = f * load_value(type, &storage[in.indices[i] * words], j);
            ref += v;
            mag += std::abs(v);
          }
          const double value = load_value(type, got, j);
          const double sum_error = 1e-6 * (mag + 1e-30) * static_cast<double>(last - first + 1);
          ASSERT_LE(std::abs(value - ref), half_ulp(type, ref) + sum_error + 1e-30)
              << "output " << b << " element " << j;
          ++checked;
        }
        if (dim % 2 == 1) {
          // The last word's high half is padding: not written.
          const float pad = got[words - 1];
          const uint16_t high = static_cast<uint16_t>(std::bit_cast<uint32_t>(pad) >> 16);
          const float expect = static_cast<float>((b * stride16 + words - 1) % 97);
          EXPECT_EQ(high, static_cast<uint16_t>(std::bit_cast<uint32_t>(expect) >> 16));
        }
      }
      EXPECT_GT(checked, 0u);
      // Without a GPU this compares the CPU with itself; with one, the GPU with the CPU.
      ASSERT_TRUE(same_bits(out16, pooled(Backend::kCpu, type, stride16)));
    }
  }
}

// Reading 16-bit gradients sums their exact float32 values in the same order: the reduction and
// the fused reduction + optimizer give the same bits as with the float32 copy of the gradients,
// and the backend the same bits as the CPU (Adam, whose bias corrections call each platform's
// powf, is compared within the backend only).
TEST_P(OutputType, BackwardOfHalfGradientsSumsTheirFloat32Values) {
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
                       Case{ValueType::kBFloat16, OptimizerKind::kAdam, true},
                       Case{ValueType::kBFloat16, OptimizerKind::kSgd, false}}) {
    OptimizerOptions o;
    o.kind = k.kind;
    o.learning_rate = 0.05f;
    o.value_type = k.type;
    o.state_in_value_type = k.state16;
    for (const uint32_t dim : {128u, 13u}) {
      const uint32_t row_words =
          value_words(k.type, dim) + optimizer_state_words(o.kind, dim, state_value_type(o));
      const size_t slot = (row_words + 3) / 4 * 4;  // 16-byte aligned rows
      const std::vector<float> storage = random_rows(rng, num_rows, slot, dim, k.type);
      const auto addresses = [&](BackendBuffer<float>& s) {
        std::vector<float*> p(num_rows);
        for (size_t r = 0; r < num_rows; ++r) p[r] = s.data() + r * slot;
        return p;
      };
      BackendBuffer<float> rows16 = upload(backend, storage), rows32 = upload(backend, storage);
      BackendBuffer<float> cpu_rows = upload(Backend::kCpu, storage);
      BackendBuffer<float*> ptrs16 = upload(backend, addresses(rows16));
      BackendBuffer<float*> ptrs32 = upload(backend, addresses(rows32));
      BackendBuffer<float*> cpu_ptrs = upload(Backend::kCpu, addresses(cpu_rows));
      BackendBuffer<float> reduced16(backend, num_rows * dim), reduced32(backend, num_rows * dim);
      ops::detail::StepWorkspace workspace(backend, 0), cpu_workspace(Backend::kCpu, 0);
      for (int step = 0; step < 4; ++step) {
        const PoolingMode mode =
            std::array{PoolingMode::kSum, PoolingMode::kMean, PoolingMode::kNone}[rng() % 3];
        const bool weighted = rng() % 2 == 0;
        // Every other step the bags come in grouped order (the training step's case: the GPU then
        // runs the hot rows beside the cold ones).
        const bool with_bags = step % 2 == 0;
        SCOPED_TRACE(to_string(k.type) + " " + to_string(k.kind) +
                     (k.state16 ? " 16-bit state" : "") + " dim " + std::to_string(dim) + " step " +
                     std::to_string(step) + " " + to_string(mode) + (weighted ? " weighted" : ""));
        const Batch in = make_batch(rng, num_rows, bags, dim, mode, k.type);
        Device d16(backend, in, nullptr, ptrs16.data(), 0, num_rows, dim, mode, weighted, k.type,
                   with_bags);
        Device d32(backend, in, nullptr, ptrs32.data(), 0, num_rows, dim, mode, weighted, k.type,
                   with_bags);
        ops::detail::reduce_gradients_grouped(backend, d16.x, d16.groups, d16.g16,
                                              {reduced16.data(), dim}, nullptr);
        ops::detail::reduce_gradients_grouped(backend, d32.x, d32.groups, d32.g32,
                                              {reduced32.data(), dim}, nullptr);
        ops::detail::reduce_and_optimize_row_ptrs(backend, o, d16.x, d16.groups, d16.g16,
                                                  ptrs16.data(), nullptr, nullptr, workspace,
                                                  nullptr);
        ops::detail::reduce_and_optimize_row_ptrs(backend, o, d32.x, d32.groups, d32.g32,
                                                  ptrs32.data(), nullptr, nullptr, workspace,
                                                  nullptr);
        backend_synchronize(backend);
        const std::vector<float> reduced = download(reduced16, num_rows * dim);
        ASSERT_TRUE(same_bits(reduced, download(reduced32, num_rows * dim)));
        const std::vector<float> got = download(rows16, storage.size());
        ASSERT_TRUE(same_bits(got, download(rows32, storage.size())));
        // The reduced gradient against float64 (so the check above compares real sums).
        for (size_t r = 0; r < num_rows; ++r) {
          struct View {
            const std::vector<uint32_t>& indices;
            const std::vector<int64_t>& offsets;
            const std::vector<float>& weights;
            const std::vector<float>& grads;
            uint32_t grad_stride;
          } view{in.indices, in.offsets, in.weights, in.grads32, dim};
          const auto want =
              ops_test::gradient64(view, r, dim, mode, weighted, [](float v) { return v; });
          for (uint32_t j = 0; j < dim; ++j) {
            const double tol = 2e-5 * (1 + std::abs(want[j])) * (1 + in.row_begin[r + 1] / 64.0);
            ASSERT_NEAR(reduced[r * dim + j], want[j], tol) << "row " << r << " element " << j;
          }
        }
        if (k.kind == OptimizerKind::kAdam && backend != Backend::kCpu) continue;
        Device c(Backend::kCpu, in, nullptr, cpu_ptrs.data(), 0, num_rows, dim, mode, weighted,
                 k.type, with_bags);
        ops::detail::reduce_and_optimize_row_ptrs(Backend::kCpu, o, c.x, c.groups, c.g16,
                                                  cpu_ptrs.data(), nullptr, nullptr, cpu_workspace,
                                                  nullptr);
        ASSERT_TRUE(same_bits(got, download(cpu_rows, storage.size())));
      }
    }
  }
}

// The opt-in unordered backward (float atomics on the GPU) reads 16-bit gradients as their float32
// values too: bfloat16 rows (SGD) within a unit of the ordered pass's given the float32 copy.
TEST_P(OutputType, UnorderedBackwardReadsHalfGradients) {
  const Backend backend = GetParam();
  dynemb::testing::TestRng test_rng;  // prints the seed
  std::mt19937_64& rng = test_rng.engine();
  const size_t num_rows = 50, bags = 300;
  const uint32_t dim = 32;
  const ValueType type = ValueType::kBFloat16;
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.05f;
  o.value_type = type;
  const uint32_t slot = (value_words(type, dim) + 3) / 4 * 4;
  const std::vector<float> storage = random_rows(rng, num_rows, slot, dim, type);
  BackendBuffer<float> a = upload(backend, storage), b = upload(backend, storage);
  std::vector<float*> pa(num_rows), pb(num_rows);
  for (size_t r = 0; r < num_rows; ++r) pa[r] = a.data() + r * slot, pb[r] = b.data() + r * slot;
  BackendBuffer<float*> ptrs_a = upload(backend, pa), ptrs_b = upload(backend, pb);
  const Batch in = make_batch(rng, num_rows, bags, dim, PoolingMode::kSum, type);
  Device da(backend, in, nullptr, ptrs_a.data(), 0, num_rows, dim, PoolingMode::kSum, false, type,
            true);
  Device db(backend, in, nullptr, ptrs_b.data(), 0, num_rows, dim, PoolingMode::kSum, false, type,
            true);
  ops::detail::StepWorkspace workspace(backend, 0);
  ops::detail::reduce_and_optimize_row_ptrs_unordered(ops_backend(backend), o, da.x, da.groups,
                                                      da.g16, ptrs_a.data(), nullptr, nullptr,
                                                      workspace, nullptr);
  ops::detail::reduce_and_optimize_row_ptrs(backend, o, db.x, db.groups, db.g32, ptrs_b.data(),
                                            nullptr, nullptr, workspace, nullptr);
  backend_synchronize(backend);
  const std::vector<float> ra = download(a, storage.size()), rb = download(b, storage.size());
  size_t moved = 0;
  for (size_t r = 0; r < num_rows; ++r) {
    for (uint32_t j = 0; j < dim; ++j) {
      const double va = load_value(type, &ra[r * slot], j), vb = load_value(type, &rb[r * slot], j);
      ASSERT_LE(std::abs(va - vb), 2 * half_ulp(type, vb) + 1e-6)
          << "row " << r << " element " << j;
      moved += vb != load_value(type, &storage[r * slot], j);
    }
  }
  EXPECT_GT(moved, 0u);
}

// Mismatched output types and strides too short for the type are refused, naming the argument.
TEST_P(OutputType, MismatchedTypesAndShortStridesAreRefused) {
  const Backend backend = GetParam();
  const uint32_t dim = 8;
  std::vector<float> rows_host(4 * dim, 1.0f);
  BackendBuffer<float> rows = upload(backend, rows_host);
  BackendBuffer<uint32_t> indices = upload(backend, std::vector<uint32_t>{0, 1, 2});
  BackendBuffer<int64_t> offsets = upload(backend, std::vector<int64_t>{0, 3});
  BackendBuffer<float> out(backend, 2 * dim);
  LookupFeature x;
  x.rows = rows.data();
  x.row_stride = dim;
  x.dim = dim;
  x.num_rows = 4;
  x.indices = indices.data();
  x.num_ids = 3;
  x.offsets = offsets.data();
  x.num_bags = 1;
  const auto refused = [&](const LookupFeature& f, const LookupOutput& o, const char* field) {
    try {
      pooled_lookup(backend, {&f, 1}, {&o, 1});
      ADD_FAILURE() << "accepted " << field;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused(x, {out.data(), dim, ValueType::kBFloat16}, "outputs[0].type");  // float32 rows
  LookupFeature x16 = x;
  x16.value_type = ValueType::kBFloat16;
  x16.row_stride = dim / 2;
  refused(x16, {out.data(), dim, ValueType::kFloat16}, "outputs[0].type");  // other 16-bit type
  refused(x16, {out.data(), dim / 2 - 1, ValueType::kBFloat16}, "outputs[0].out_stride");
  refused(x, {out.data(), dim - 1, ValueType::kFloat32}, "outputs[0].out_stride");
  // The reduced gradients are float32.
  BackendBuffer<float> row_grads(backend, 4 * dim);
  const LookupOutput g{out.data(), dim / 2, ValueType::kBFloat16};
  const LookupOutput r{row_grads.data(), dim, ValueType::kBFloat16};
  EXPECT_THROW(reduce_gradients(backend, {&x16, 1}, {&g, 1}, {&r, 1}), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, OutputType, dynemb::testing::all_backends(),
                         dynemb::testing::backend_name);

}  // namespace
}  // namespace dynemb

// float16 / bfloat16 rows: training follows float32 training within the types' rounding (CPU),
// the GPU trains bit for bit as the CPU in every type, and bad settings are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/test_random.hpp"
#include "dynemb/core/error.hpp"
#include "embedding/value_type_training.hpp"

namespace dynemb {
namespace {

using value_type_test::Batch;
using value_type_test::embeddings;
using value_type_test::make_batches;
using value_type_test::run_step;
using value_type_test::table_words;

EmbeddingOptions task_options(uint32_t dim, OptimizerKind kind, ValueType type, uint64_t seed) {
  EmbeddingOptions o;
  o.dim = dim;
  o.value_type = type;
  o.table.init_capacity = 1 << 12;
  o.table.max_capacity = 1 << 14;
  o.table.score_policy = ScorePolicy::kStep;
  o.table.initializer.kind = InitializerKind::kNormal;
  o.table.initializer.stddev = 0.05f;
  o.table.initializer.seed = seed;
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = kind == OptimizerKind::kAdam ? 0.01f : 0.1f;
  o.eval_initializer.kind = InitializerKind::kUniform;  // evaluation reads drawn rows too
  o.eval_initializer.seed = seed + 1;
  return o;
}

// The stated tolerance (docs/value_types.md): each store rounds a weight by at most half a unit in
// the last place of the type (a unit at 1.0: 2^-10 for float16, 2^-7 for bfloat16), and the
// regression pulls both runs toward the same targets, so after 100 steps the 16-bit run's rows
// differ from the float32 run's by at most kRowUnits units at the 99th percentile and in RMS
// over every element, and its final loss is within kLossTolerance (relative) of float32's. (The
// maximum is not bounded: AdaGrad's and Adam's first step on a row moves each weight by about
// the learning rate whatever the gradient's size, so a gradient near 0 whose sign the rounding
// flips sends one element the other way.)
constexpr double kRowUnits = 4;
constexpr double kLossTolerance = 0.02;

double unit_of(ValueType type) {
  return type == ValueType::kFloat16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
}

struct Agreement {
  double first_loss = 0, loss32 = 0, loss16 = 0, max_row_diff = 0, max_abs = 0, rms_diff = 0,
         p99_diff = 0;
};

Agreement train_both(uint32_t dim, OptimizerKind kind, ValueType type, bool stochastic,
                     uint64_t seed, bool state16 = false, bool output16 = false) {
  const std::vector<Batch> batches = make_batches(dim, 100, 256, 3000, seed);
  EmbeddingOptions o32 = task_options(dim, kind, ValueType::kFloat32, seed);
  EmbeddingOptions o16 = task_options(dim, kind, type, seed);
  o16.stochastic_rounding = stochastic;
  o16.state_in_value_type = state16;
  if (output16) o16.output_type = type;
  Embedding<int64_t> e32(Backend::kCpu, o32), e16(Backend::kCpu, o16);
  Agreement a;
  std::vector<float> out32, out16;
  for (size_t s = 0; s < batches.size(); ++s) {
    const double l32 = run_step(e32, batches[s], dim, out32);
    const double l16 = run_step(e16, batches[s], dim, out16);
    if (s == 0) a.first_loss = l32;
    a.loss32 = l32;
    a.loss16 = l16;
  }
  const auto r32 = embeddings(e32), r16 = embeddings(e16);
  EXPECT_EQ(r32.size(), r16.size());
  std::vector<double> diffs;
  for (const auto& [k, row] : r32) {
    const auto it = r16.find(k);
    if (it == r16.end()) {
      ADD_FAILURE() << "key " << k << " missing from the 16-bit table";
      continue;
    }
    for (uint32_t j = 0; j < dim; ++j) {
      a.max_row_diff = std::max(a.max_row_diff, std::abs(double{row[j]} - it->second[j]));
      a.max_abs = std::max(a.max_abs, std::abs(double{row[j]}));
      const double d = std::abs(double{row[j]} - it->second[j]);
      a.rms_diff += d * d;
      diffs.push_back(d);
    }
  }
  a.rms_diff = std::sqrt(a.rms_diff / static_cast<double>(std::max<size_t>(1, diffs.size())));
  if (!diffs.empty()) {
    auto p99 = diffs.begin() + static_cast<ptrdiff_t>(diffs.size() * 99 / 100);
    std::nth_element(diffs.begin(), p99, diffs.end());
    a.p99_diff = *p99;
  }
  return a;
}

// Trains the task in float32 and in `type` (with the optimizer state in `type` too when
// state_in_value_type) from one seed, prints the agreement and checks it against the stated
// tolerance: the task was learned (so agreement means something; Adam's 100 steps take the loss
// to 0.42-0.53 of its start, AdaGrad's to under 0.1), and the 16-bit run learned it as well,
// with rows close to float32's.
void expect_agreement(uint32_t dim, OptimizerKind kind, ValueType type, bool stochastic,
                      uint64_t seed, bool state_in_value_type, bool output16 = false) {
  const Agreement a = train_both(dim, kind, type, stochastic, seed, state_in_value_type, output16);
  const std::string what = to_string(type) + (state_in_value_type ? " state " : " ") +
                           (output16 ? "outputs " : "") + to_string(kind) + " dim " +
                           std::to_string(dim) + (stochastic ? " stochastic" : " nearest");
  SCOPED_TRACE(what);
  std::cout << "  " << what << ": loss " << a.first_loss << " -> f32 " << a.loss32 << " / 16-bit "
            << a.loss16 << ", max row diff " << a.max_row_diff << " (max |w| " << a.max_abs
            << "), rms " << a.rms_diff << ", p99 " << a.p99_diff << "\n";
  EXPECT_LT(a.loss32, 0.75 * a.first_loss);
  EXPECT_LE(std::abs(a.loss16 - a.loss32), kLossTolerance * a.loss32);
  EXPECT_LE(a.p99_diff, kRowUnits * unit_of(type) * std::max(1.0, a.max_abs));
  EXPECT_LE(a.rms_diff, kRowUnits * unit_of(type) * std::max(1.0, a.max_abs));
}

TEST(EmbeddingValueType, HalfRowsFollowFloat32TrainingFor100Steps) {
  testing::TestRng rng;
  for (ValueType type : {ValueType::kFloat16, ValueType::kBFloat16}) {
    for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdaGrad}) {
      for (bool stochastic : {false, true}) {
        const uint32_t dim = rng.chance(0.5) ? 16 : 13;  // odd: the last word's high half unused
        expect_agreement(dim, kind, type, stochastic, rng.next(), false);
      }
    }
  }
}

// The optimizer state in bfloat16 too (state_in_value_type, rounded stochastically) keeps the
// same stated tolerance as bfloat16 weights with float32 state (kRowUnits units at the 99th
// percentile and in RMS, final loss within kLossTolerance of float32's; docs/value_types.md).
TEST(EmbeddingValueType, HalfStateFollowsFloat32TrainingFor100Steps) {
  testing::TestRng rng;
  for (ValueType type : {ValueType::kBFloat16}) {
    for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdaGrad}) {
      for (bool stochastic : {false, true}) {
        const uint32_t dim = rng.chance(0.5) ? 16 : 13;
        expect_agreement(dim, kind, type, stochastic, rng.next(), true);
      }
    }
  }
}

// 16-bit outputs and gradients (output_type = the rows' type: each pooled output and each
// gradient rounded once to nearest even) keep the same stated tolerance against float32 training
// (kRowUnits units at the 99th percentile and in RMS, final loss within kLossTolerance).
TEST(EmbeddingValueType, HalfOutputsFollowFloat32TrainingFor100Steps) {
  testing::TestRng rng;
  for (ValueType type : {ValueType::kFloat16, ValueType::kBFloat16}) {
    for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdaGrad}) {
      const bool stochastic = rng.chance(0.5);
      const uint32_t dim = rng.chance(0.5) ? 16 : 13;
      expect_agreement(dim, kind, type, stochastic, rng.next(), false, true);
    }
  }
  // With the state in bfloat16 too (the 13.1M benchmark's fastest setting).
  expect_agreement(16, OptimizerKind::kAdam, ValueType::kBFloat16, true, rng.next(), true, true);
}

// 16-bit outputs are the float32 outputs rounded once, and gradients of that type train the rows
// exactly as their float32 values do: an embedding with bfloat16 outputs against one with float32
// outputs fed the same (bfloat16-representable) gradients, row words equal after every step; by
// address, with counter admission (the dense rows) and with gradient_check = ERROR (the two
// passes), SUM and NONE pooling.
TEST(EmbeddingValueType, HalfOutputsAreTheFloat32OutputsRounded) {
  testing::TestRng rng;
  const uint32_t dim = 12;
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    const ValueType type = variant % 2 == 0 ? ValueType::kBFloat16 : ValueType::kFloat16;
    EmbeddingOptions o = task_options(dim, OptimizerKind::kAdaGrad, type, rng.next());
    if (variant == 1) o.admit_threshold = 2;
    if (variant == 2) o.gradient_check = SafeCheck::kError;
    const PoolingMode mode = variant == 3 ? PoolingMode::kNone : PoolingMode::kSum;
    EmbeddingOptions o16 = o;
    o16.output_type = type;
    Embedding<int64_t> e32(Backend::kCpu, o), e16(Backend::kCpu, o16);
    const uint32_t words = value_words(type, dim);
    const std::vector<Batch> batches = make_batches(dim, 12, 64, 300, rng.next());
    for (const Batch& b : batches) {
      const size_t bags = b.offsets.size() - 1;
      const size_t rows = mode == PoolingMode::kNone ? b.keys.size() : bags;
      const EmbeddingBatch<int64_t> batch{b.keys.data(), b.keys.size(), b.offsets.data(),
                                          bags,          nullptr,       mode};
      std::vector<float> out32(rows * dim), out16(rows * words);
      e32.forward(batch, out32.data(), dim, true);
      e16.forward(batch, out16.data(), words, true);
      std::vector<float> g32(rows * dim), g16(rows * words);
      for (size_t r = 0; r < rows; ++r) {
        for (uint32_t j = 0; j < dim; ++j) {
          const float f32 = out32[r * dim + j];
          ASSERT_EQ(reinterpret_cast<const uint16_t*>(&out16[r * words])[j],
                    type == ValueType::kBFloat16 ? to_bits16<ValueType::kBFloat16>(f32)
                                                 : to_bits16<ValueType::kFloat16>(f32))
              << "output " << r << " element " << j;
          const float target = b.target[(mode == PoolingMode::kNone ? 0 : r) * dim + j];
          store_value(type, &g16[r * words], j, f32 - target);
          g32[r * dim + j] = load_value(type, &g16[r * words], j);
        }
      }
      e32.backward(g32.data(), dim);
      e16.backward(g16.data(), words);
      e32.end_step();
      e16.end_step();
    }
    const auto a = table_words(e32), c = table_words(e16);
    ASSERT_EQ(a.size(), c.size());
    EXPECT_GT(a.size(), 0u);
    for (const auto& [k, w] : a) {
      const auto it = c.find(k);
      ASSERT_NE(it, c.end()) << "key " << k;
      ASSERT_EQ(w, it->second) << "key " << k;
    }
  }
}

// An output_type other than float32 or the rows' type is refused by name; a collection's tables
// must agree on it.
TEST(EmbeddingValueType, OutputTypeMustBeFloat32OrTheRowType) {
  EmbeddingOptions o = task_options(8, OptimizerKind::kSgd, ValueType::kFloat32, 1);
  o.output_type = ValueType::kBFloat16;
  EXPECT_THROW(validate_embedding_options(o), InvalidArgument);
  o.value_type = ValueType::kFloat16;
  try {
    validate_embedding_options(o);
    ADD_FAILURE() << "float16 rows with bfloat16 outputs accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("output_type"), std::string::npos) << e.what();
  }
  o.value_type = ValueType::kBFloat16;
  EXPECT_NO_THROW(validate_embedding_options(o));
}

// state_in_value_type stores the state arrays as bfloat16 elements: an Adam row of dim d takes
// d / 2 words of weights, 2 * d / 2 of m and v and one step count (padded to 4 words), and m and
// v decode to the float32-state run's values within the rounding; the step count is the step.
TEST(EmbeddingValueType, HalfStateRowsPackTheState) {
  testing::TestRng rng;
  for (ValueType type : {ValueType::kBFloat16}) {
    const uint32_t dim = 16;
    const uint64_t seed = rng.next();
    EmbeddingOptions o = task_options(dim, OptimizerKind::kAdam, type, seed);
    o.state_in_value_type = true;
    EmbeddingOptions o32 = task_options(dim, OptimizerKind::kAdam, type, seed);
    Embedding<int64_t> e(Backend::kCpu, o), e32(Backend::kCpu, o32);
    EXPECT_EQ(e.row_dim(), (dim / 2 + dim + 1 + 3) / 4 * 4);
    EXPECT_EQ(e32.row_dim(), (dim / 2 + 2 * dim + 1 + 3) / 4 * 4);
    EXPECT_EQ(e.row_layout().optimizer, "adam[state:" + to_string(type) + "]");
    EXPECT_EQ(e32.row_layout().optimizer, "adam");
    const Batch b = make_batches(dim, 1, 64, 100, seed).front();
    std::vector<float> out, out32;
    run_step(e, b, dim, out);
    run_step(e32, b, dim, out32);
    const auto words = table_words(e), words32 = table_words(e32);
    ASSERT_EQ(words.size(), words32.size());
    for (const auto& [k, w] : words) {
      const std::vector<uint32_t>& w32 = words32.at(k);
      const float* row = reinterpret_cast<const float*>(w.data());
      const float* row32 = reinterpret_cast<const float*>(w32.data());
      for (uint32_t j = 0; j < 2 * dim; ++j) {
        // m then v: 16-bit elements after the weights; float32 words after them in e32.
        const float m16 = load_value(type, row + dim / 2, j);
        const float m32 = row32[dim / 2 + j];
        // float16's subnormals (under 2^-14) are spaced 2^-24 apart.
        const double floor16 = type == ValueType::kFloat16 ? std::ldexp(1.0, -24) : 0.0;
        ASSERT_NEAR(m16, m32, 2 * unit_of(type) * std::abs(m32) + floor16) << "key " << k;
      }
      EXPECT_EQ(w[dim / 2 + dim], 1u) << "Adam's step count after the 16-bit arrays";
      EXPECT_EQ(w32[dim / 2 + 2 * dim], 1u);
    }
  }
}

// The row really holds 16-bit elements: half the embedding's bytes, and each element is the
// float32 value rounded (a float32 row would not decode this way).
TEST(EmbeddingValueType, RowsPackTwoElementsAWord) {
  for (ValueType type : {ValueType::kFloat16, ValueType::kBFloat16}) {
    for (uint32_t dim : {8u, 13u}) {
      EmbeddingOptions o = task_options(dim, OptimizerKind::kAdam, type, 7);
      EmbeddingOptions o32 = task_options(dim, OptimizerKind::kAdam, ValueType::kFloat32, 7);
      Embedding<int64_t> e(Backend::kCpu, o), e32(Backend::kCpu, o32);
      EXPECT_EQ(e.row_dim(), embedding_row_dim(o));
      EXPECT_EQ(e.row_layout().embedding_words(), (dim + 1) / 2);
      EXPECT_EQ(e.row_layout().state_dim, e.row_dim() - (dim + 1) / 2);
      EXPECT_EQ(e.row_layout().value_type, type);
      std::vector<float> out;
      const Batch b = make_batches(dim, 1, 64, 100, 3).front();
      std::vector<float> out32;
      run_step(e, b, dim, out);
      run_step(e32, b, dim, out32);
      // Forward read the rounded initial rows: each output is within the rounding of float32's.
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], out32[i], 2 * unit_of(type) * (std::abs(out32[i]) + 0.05));
      const auto words = table_words(e);
      for (const auto& [k, w] : words) {
        ASSERT_EQ(w.size(), e.row_dim());
        if (dim % 2 == 1) EXPECT_EQ(w[dim / 2] >> 16, 0u) << "the unused half stays 0";
      }
    }
  }
}

TEST(EmbeddingValueType, BadSettingsAreRefusedByName) {
  EmbeddingOptions o = task_options(8, OptimizerKind::kSgd, ValueType::kFloat32, 1);
  o.stochastic_rounding = true;
  try {
    validate_embedding_options(o);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("stochastic_rounding"), std::string::npos) << m;
    EXPECT_NE(m.find("float32"), std::string::npos) << m;
  }
  o.stochastic_rounding = false;
  o.state_in_value_type = true;
  for (ValueType type : {ValueType::kFloat32, ValueType::kFloat16}) {
    o.value_type = type;
    try {
      validate_embedding_options(o);
      FAIL() << "no exception";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("state_in_value_type"), std::string::npos) << m;
      EXPECT_NE(m.find(to_string(type)), std::string::npos) << m;
    }
    EXPECT_THROW(Embedding<int64_t>(Backend::kCpu, o), InvalidArgument);
  }
  o.state_in_value_type = false;
  o.value_type = static_cast<ValueType>(7);
  try {
    validate_embedding_options(o);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("value_type"), std::string::npos) << m;
    EXPECT_NE(m.find("7"), std::string::npos) << m;
  }
}

// accum_or_assign adds float32 words: refused (nothing changed) on a table of 16-bit rows.
TEST(EmbeddingValueType, AccumOnPackedRowsIsRefused) {
  EmbeddingOptions o = task_options(8, OptimizerKind::kSgd, ValueType::kBFloat16, 1);
  Embedding<int64_t> e(Backend::kCpu, o);
  const int64_t key = 5;
  std::vector<float> row(e.row_dim(), 1.0f);
  EXPECT_THROW(e.table().accum_or_assign(1, &key, row.data()), InvalidArgument);
  EXPECT_EQ(e.table().size(), 0u);
}

// --- CUDA: the same training bit for bit --------------------------------------------------------

// Trains the CPU and the GPU on the same stream; outputs and every row word must be equal.
void expect_bitwise_parity(uint32_t dim, OptimizerKind kind, ValueType type, bool stochastic,
                           uint64_t seed, bool state16 = false, bool output16 = false) {
  SCOPED_TRACE(to_string(type) + " " + to_string(kind) + " dim " + std::to_string(dim) +
               (stochastic ? " stochastic" : "") + (state16 ? " 16-bit state" : "") +
               (output16 ? " 16-bit outputs" : ""));
  const std::vector<Batch> batches = make_batches(dim, 30, 300, 2000, seed);
  EmbeddingOptions o = task_options(dim, kind, type, seed);
  o.stochastic_rounding = stochastic;
  o.state_in_value_type = state16;
  if (output16) o.output_type = type;
  Embedding<int64_t> cpu(Backend::kCpu, o), gpu(Backend::kCuda, o);
  std::vector<float> cout, gout;
  for (size_t s = 0; s < batches.size(); ++s) {
    run_step(cpu, batches[s], dim, cout);
    run_step(gpu, batches[s], dim, gout);
    ASSERT_EQ(cout.size(), gout.size());
    ASSERT_EQ(std::memcmp(cout.data(), gout.data(), cout.size() * sizeof(float)), 0)
        << "forward outputs differ at step " << s;
  }
  const auto c = table_words(cpu), g = table_words(gpu);
  ASSERT_EQ(c.size(), g.size());
  for (const auto& [k, w] : c) {
    const auto it = g.find(k);
    ASSERT_NE(it, g.end()) << "key " << k;
    ASSERT_EQ(w, it->second) << "key " << k << " differs";
  }
}

TEST(EmbeddingValueTypeCuda, TrainingMatchesCpuBitForBit) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  testing::TestRng rng;
  // Adam is left out: its bias corrections use powf, which the host and the GPU round apart.
  for (ValueType type : {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBFloat16}) {
    for (OptimizerKind kind :
         {OptimizerKind::kSgd, OptimizerKind::kAdaGrad, OptimizerKind::kRowWiseAdaGrad}) {
      for (uint32_t dim : {16u, 13u, 128u})
        expect_bitwise_parity(dim, kind, type, false, rng.next());
    }
    if (type != ValueType::kFloat32)
      expect_bitwise_parity(32, OptimizerKind::kAdaGrad, type, true, rng.next());
  }
}

// The 16-bit optimizer state (state_in_value_type): the GPU's rows equal the CPU's word for word,
// stochastic rounding included, for every optimizer with per-element state but Adam (powf).
TEST(EmbeddingValueTypeCuda, HalfStateTrainingMatchesCpuBitForBit) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  testing::TestRng rng;
  for (ValueType type : {ValueType::kBFloat16}) {
    for (OptimizerKind kind : {OptimizerKind::kAdaGrad, OptimizerKind::kRmsProp,
                               OptimizerKind::kFtrl, OptimizerKind::kRowWiseAdaGrad}) {
      for (uint32_t dim : {16u, 13u, 128u})
        expect_bitwise_parity(dim, kind, type, rng.chance(0.5), rng.next(), true);
    }
  }
}

// 16-bit outputs and gradients (output_type): the GPU's outputs and rows equal the CPU's word for
// word, for both 16-bit types, with float32 and bfloat16 optimizer state.
TEST(EmbeddingValueTypeCuda, HalfOutputsTrainingMatchesCpuBitForBit) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  testing::TestRng rng;
  for (ValueType type : {ValueType::kFloat16, ValueType::kBFloat16}) {
    for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdaGrad}) {
      for (uint32_t dim : {16u, 13u, 128u})
        expect_bitwise_parity(dim, kind, type, rng.chance(0.5), rng.next(), false, true);
    }
  }
  for (uint32_t dim : {16u, 128u}) {
    expect_bitwise_parity(dim, OptimizerKind::kRmsProp, ValueType::kBFloat16, true, rng.next(),
                          true, true);
  }
}

// New rows of a CUDA table equal a CPU table's, word for word, in every type and initializer.
TEST(EmbeddingValueTypeCuda, InitializersMatchCpuBitForBit) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  testing::TestRng rng;
  for (ValueType type : {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBFloat16}) {
    for (InitializerKind kind : {InitializerKind::kUniform, InitializerKind::kNormal,
                                 InitializerKind::kTruncatedNormal, InitializerKind::kDebug}) {
      for (uint32_t dim : {4u, 7u, 64u, 200u}) {
        TableOptions t;
        t.dim = dim;
        t.init_capacity = t.max_capacity = 1 << 12;
        t.initializer.kind = kind;
        t.initializer.seed = rng.next();
        t.initializer.value_type = type;
        t.initializer.width = type == ValueType::kFloat32 ? 0 : 2 * dim - 1;
        auto cpu = make_table<int64_t>(Backend::kCpu, t);
        auto gpu = make_table<int64_t>(Backend::kCuda, t);
        const size_t n = 1000;
        std::vector<int64_t> keys(n);
        for (auto& k : keys) k = static_cast<int64_t>(rng.next() >> 2);
        std::vector<float> crow(n * dim), grow(n * dim);
        cpu->find_or_insert(n, keys.data(), crow.data(), nullptr);
        BackendBuffer<int64_t> dk(Backend::kCuda, n);
        BackendBuffer<float> dv(Backend::kCuda, n * dim);
        dk.upload(keys.data(), n);
        gpu->find_or_insert(n, dk.data(), dv.data(), nullptr);
        backend_synchronize(Backend::kCuda);
        dv.download(grow.data(), grow.size());
        ASSERT_EQ(std::memcmp(crow.data(), grow.data(), crow.size() * sizeof(float)), 0)
            << to_string(type) << " " << to_string(kind) << " dim " << dim;
      }
    }
  }
}

// The opt-in unordered backward (float atomics) on the GPU agrees with the deterministic one
// within float32 rounding: a skewed stream (hot rows of hundreds of ids) for 30 steps, rows
// compared element by element.
TEST(EmbeddingValueTypeCuda, UnorderedBackwardAgreesWithDeterministic) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  testing::TestRng rng;
  for (ValueType type : {ValueType::kFloat32, ValueType::kBFloat16}) {
    for (OptimizerKind kind : {OptimizerKind::kAdaGrad, OptimizerKind::kSgd}) {
      const uint32_t dim = 32;
      SCOPED_TRACE(to_string(type) + " " + to_string(kind));
      const std::vector<Batch> batches = make_batches(dim, 30, 2000, 400, rng.next());
      EmbeddingOptions o = task_options(dim, kind, type, rng.next());
      // Hot rows sum hundreds of ids: SGD needs a small rate not to diverge (a diverging run
      // would amplify any difference).
      if (kind == OptimizerKind::kSgd) o.optimizer.learning_rate = 0.01f;
      Embedding<int64_t> ordered(Backend::kCuda, o);
      o.deterministic_backward = false;
      Embedding<int64_t> unordered(Backend::kCuda, o);
      std::vector<float> a, b;
      double first = 0, last = 0;
      for (size_t s = 0; s < batches.size(); ++s) {
        last = run_step(ordered, batches[s], dim, a);
        if (s == 0) first = last;
        run_step(unordered, batches[s], dim, b);
      }
      ASSERT_LT(last, first) << "the ordered run did not learn";
      const auto ra = embeddings(ordered), rb = embeddings(unordered);
      ASSERT_EQ(ra.size(), rb.size());
      // float32 rows: a few units of float32 rounding per step's sum; bfloat16 rows: the same
      // sums may round a stored weight one unit apart.
      const double rel = type == ValueType::kFloat32 ? 1e-4 : 4 * std::ldexp(1.0, -8);
      size_t differing = 0;
      for (const auto& [k, row] : ra) {
        const auto it = rb.find(k);
        ASSERT_NE(it, rb.end()) << "key " << k;
        for (uint32_t j = 0; j < dim; ++j) {
          ASSERT_NEAR(row[j], it->second[j], rel * (1e-2 + std::abs(row[j]))) << "key " << k;
          differing += row[j] != it->second[j];
        }
      }
      std::cout << "  " << to_string(type) << " " << to_string(kind) << ": " << differing << " of "
                << ra.size() * dim << " elements differ in their last bits\n";
    }
  }
}

}  // namespace
}  // namespace dynemb

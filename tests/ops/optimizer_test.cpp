// Each fused optimizer against a float64 implementation of its published update rule, over
// many steps on rows that are updated repeatedly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "ops/reference_optimizer.hpp"

namespace dynemb {
namespace {

struct Case {
  const char* name;
  OptimizerOptions options;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.05f;
  c.push_back({"sgd", o});
  o.weight_decay = 0.01f;
  c.push_back({"sgd_weight_decay", o});
  o = {};
  o.kind = OptimizerKind::kAdam;
  o.learning_rate = 0.01f;
  c.push_back({"adam", o});
  o.clip_norm = 0.5f;
  o.weight_decay = 0.001f;
  c.push_back({"adam_clip_norm_wd", o});
  o = {};
  o.kind = OptimizerKind::kAdaGrad;
  o.learning_rate = 0.1f;
  o.initial_accumulator = 0.1f;
  o.eps = 1e-6f;
  c.push_back({"adagrad", o});
  o.clip_value = 0.3f;
  c.push_back({"adagrad_clip_value", o});
  o = {};
  o.kind = OptimizerKind::kRowWiseAdaGrad;
  o.learning_rate = 0.1f;
  o.eps = 1e-6f;
  c.push_back({"rowwise_adagrad", o});
  o = {};
  o.kind = OptimizerKind::kRmsProp;
  o.learning_rate = 0.01f;
  o.eps = 1e-6f;
  c.push_back({"rmsprop", o});
  o = {};
  o.kind = OptimizerKind::kFtrl;
  o.learning_rate = 0.1f;
  o.initial_accumulator = 0.1f;
  o.ftrl_l1 = 0.001f;
  o.ftrl_l2 = 0.01f;
  c.push_back({"ftrl", o});
  return c;
}

class OptimizerRule : public testing::TestWithParam<Case> {};

TEST_P(OptimizerRule, MatchesFloat64ReferenceOverManySteps) {
  const OptimizerOptions& o = GetParam().options;
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr uint32_t kDim = 24;
  constexpr int kRows = 16, kSteps = 300;
  const uint32_t state = optimizer_state_dim(o.kind, kDim);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kDim + state));
  std::vector<test::RefRow> refs(kRows);
  for (int r = 0; r < kRows; ++r) {
    for (uint32_t j = kDim; j < kDim + state; ++j) rows[r][j] = 0.0f;  // a fresh row's state
    refs[r].w.resize(kDim);
    refs[r].a.assign(kDim, 0.0);
    refs[r].b.assign(kDim, 0.0);
    refs[r].row_acc = o.kind == OptimizerKind::kRowWiseAdaGrad ? o.initial_accumulator : 0.0;
    if (o.kind == OptimizerKind::kAdaGrad) refs[r].a.assign(kDim, o.initial_accumulator);
    if (o.kind == OptimizerKind::kFtrl) refs[r].b.assign(kDim, o.initial_accumulator);
    for (uint32_t j = 0; j < kDim; ++j) {
      rows[r][j] = 0.1f * normal(rng);
      refs[r].w[j] = rows[r][j];
    }
  }
  // Repeated keys: each step updates a random subset, some rows many times in a row.
  std::uniform_int_distribution<int> pick(0, kRows - 1);
  for (int step = 0; step < kSteps; ++step) {
    const int r = step % 3 == 0 ? 0 : pick(rng);
    std::vector<float> g(kDim);
    std::vector<double> gd(kDim);
    for (uint32_t j = 0; j < kDim; ++j) {
      g[j] = normal(rng) * (j % 5 == 0 ? 3.0f : 0.5f);
      gd[j] = g[j];
    }
    apply_optimizer(o, rows[r].data(), g.data(), kDim);
    test::ref_update(o, refs[r], gd);
  }
  double max_rel = 0.0;
  for (int r = 0; r < kRows; ++r) {
    for (uint32_t j = 0; j < kDim; ++j) {
      const double ref = refs[r].w[j];
      const double err = std::abs(rows[r][j] - ref) / std::max(1e-3, std::abs(ref));
      max_rel = std::max(max_rel, err);
      ASSERT_TRUE(std::isfinite(rows[r][j]));
    }
  }
  EXPECT_LT(max_rel, 2e-3) << GetParam().name;
  if (o.kind == OptimizerKind::kAdam) {
    uint32_t t0;
    std::memcpy(&t0, &rows[0][kDim + 2 * kDim], sizeof t0);
    EXPECT_EQ(static_cast<int>(t0), refs[0].t) << "Adam's per-row step count";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerRule, testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(OptimizerValidation, NamesTheBadHyperParameter) {
  OptimizerOptions o;
  o.learning_rate = -1.0f;
  try {
    validate_optimizer(o, "EmbeddingOptions");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("learning_rate"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-1"), std::string::npos) << e.what();
  }
  o = {};
  o.kind = OptimizerKind::kAdam;
  o.beta2 = 1.0f;
  EXPECT_THROW(validate_optimizer(o, "x"), InvalidArgument);
  EXPECT_EQ(parse_optimizer("rowwise_adagrad"), OptimizerKind::kRowWiseAdaGrad);
  EXPECT_THROW(parse_optimizer("lamb"), InvalidArgument);
}

TEST(OptimizerStateDim, MatchesEachRule) {
  EXPECT_EQ(optimizer_state_dim(OptimizerKind::kSgd, 8), 0u);
  EXPECT_EQ(optimizer_state_dim(OptimizerKind::kAdam, 8), 17u);
  EXPECT_EQ(optimizer_state_dim(OptimizerKind::kAdaGrad, 8), 8u);
  EXPECT_EQ(optimizer_state_dim(OptimizerKind::kRowWiseAdaGrad, 8), 1u);
  EXPECT_EQ(optimizer_state_dim(OptimizerKind::kRmsProp, 8), 8u);
  EXPECT_EQ(optimizer_state_dim(OptimizerKind::kFtrl, 8), 16u);
}

}  // namespace
}  // namespace dynemb

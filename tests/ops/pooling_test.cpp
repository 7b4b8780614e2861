// pooled_lookup and reduce_gradients against float64 references on random jagged bags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dynemb/core/error.hpp"
#include "dynemb/ops/pooling.hpp"

namespace dynemb {
namespace {

struct RandomFeature {
  uint32_t dim;
  size_t num_rows;
  std::vector<float> rows, weights;
  std::vector<uint32_t> indices;
  std::vector<int64_t> offsets;
  PoolingMode mode;

  LookupFeature view(bool weighted) const {
    LookupFeature f;
    f.rows = rows.data();
    f.row_stride = dim + 3;  // rows carry optimizer state after the embedding
    f.dim = dim;
    f.num_rows = num_rows;
    f.indices = indices.data();
    f.num_ids = indices.size();
    f.offsets = offsets.data();
    f.num_bags = offsets.size() - 1;
    f.weights = weighted ? weights.data() : nullptr;
    f.mode = mode;
    return f;
  }
};

RandomFeature make_feature(std::mt19937& rng, uint32_t dim, size_t bags, PoolingMode mode) {
  RandomFeature f{dim, 50, {}, {}, {}, {0}, mode};
  std::normal_distribution<float> normal;
  f.rows.resize(f.num_rows * (dim + 3));
  for (auto& x : f.rows) x = normal(rng);
  std::uniform_int_distribution<int> len(0, 6);
  std::uniform_int_distribution<uint32_t> row(0, f.num_rows - 1);
  for (size_t b = 0; b < bags; ++b) {
    const int l = len(rng);
    for (int i = 0; i < l; ++i) {
      f.indices.push_back(row(rng));
      f.weights.push_back(normal(rng));
    }
    f.offsets.push_back(static_cast<int64_t>(f.indices.size()));
  }
  return f;
}

class Pooling : public testing::TestWithParam<std::tuple<PoolingMode, bool>> {};

TEST_P(Pooling, ForwardAndBackwardMatchFloat64) {
  const auto [mode, weighted] = GetParam();
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Two features of different dims written into one output row, side by side.
  std::vector<RandomFeature> feats = {make_feature(rng, 5, 40, mode),
                                      make_feature(rng, 16, 40, mode)};
  const uint32_t stride = 5 + 16;
  const size_t out_rows =
      mode == PoolingMode::kNone ? std::max(feats[0].indices.size(), feats[1].indices.size()) : 40;
  std::vector<float> out(out_rows * stride, NAN);
  std::vector<LookupFeature> views = {feats[0].view(weighted), feats[1].view(weighted)};
  std::vector<LookupOutput> outs = {{out.data(), stride}, {out.data() + 5, stride}};
  pooled_lookup(Backend::kCpu, views, outs);

  std::normal_distribution<float> normal;
  std::vector<float> grad(out_rows * stride);
  for (auto& g : grad) g = normal(rng);
  std::vector<std::vector<float>> row_grads(2);
  std::vector<LookupOutput> gviews = {{grad.data(), stride}, {grad.data() + 5, stride}};
  std::vector<LookupOutput> rviews;
  for (int f = 0; f < 2; ++f) {
    row_grads[f].assign(feats[f].num_rows * feats[f].dim, NAN);
    rviews.push_back({row_grads[f].data(), feats[f].dim});
  }
  reduce_gradients(Backend::kCpu, views, gviews, rviews);

  for (int f = 0; f < 2; ++f) {
    const RandomFeature& x = feats[f];
    const float* o = out.data() + (f == 0 ? 0 : 5);
    const float* g = grad.data() + (f == 0 ? 0 : 5);
    std::vector<double> ref_rg(x.num_rows * x.dim, 0.0);
    for (size_t b = 0; b + 1 < x.offsets.size(); ++b) {
      const int64_t begin = x.offsets[b], end = x.offsets[b + 1];
      std::vector<double> acc(x.dim, 0.0);
      for (int64_t i = begin; i < end; ++i) {
        const double w = weighted ? x.weights[i] : 1.0;
        const double factor = mode == PoolingMode::kMean ? w / double(end - begin) : w;
        for (uint32_t j = 0; j < x.dim; ++j) {
          const double v = x.rows[x.indices[i] * (x.dim + 3) + j];
          if (mode == PoolingMode::kNone) {
            ASSERT_NEAR(o[i * stride + j], w * v, 1e-5) << "id " << i;
          }
          acc[j] += factor * v;
          const double gg = mode == PoolingMode::kNone ? g[i * stride + j] : g[b * stride + j];
          ref_rg[x.indices[i] * x.dim + j] += factor * gg;
        }
      }
      if (mode != PoolingMode::kNone) {
        for (uint32_t j = 0; j < x.dim; ++j) {
          ASSERT_NEAR(o[b * stride + j], acc[j], 1e-4 * (1 + std::abs(acc[j]))) << "bag " << b;
        }
      }
    }
    for (size_t k = 0; k < ref_rg.size(); ++k) {
      ASSERT_NEAR(row_grads[f][k], ref_rg[k], 1e-4 * (1 + std::abs(ref_rg[k]))) << "elem " << k;
    }
  }
  // Deterministic: the same call again gives bit-identical row gradients.
  std::vector<float> again(row_grads[1].size(), NAN);
  std::vector<LookupOutput> rv2 = {rviews[0], {again.data(), feats[1].dim}};
  reduce_gradients(Backend::kCpu, views, gviews, rv2);
  EXPECT_EQ(0, std::memcmp(again.data(), row_grads[1].data(), again.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Modes, Pooling,
                         testing::Combine(testing::Values(PoolingMode::kSum, PoolingMode::kMean,
                                                          PoolingMode::kNone),
                                          testing::Bool()),
                         [](const auto& info) {
                           return to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_weighted" : "");
                         });

TEST(PoolingValidation, BadOffsetsAndIndicesAreNamed) {
  std::vector<float> rows(4 * 2, 1.0f), out(2 * 2, -7.0f);
  std::vector<uint32_t> indices = {0, 1, 3};
  std::vector<int64_t> offsets = {0, 2, 1};  // not monotone
  LookupFeature f;
  f.rows = rows.data();
  f.row_stride = 2;
  f.dim = 2;
  f.num_rows = 4;
  f.indices = indices.data();
  f.num_ids = 3;
  f.offsets = offsets.data();
  f.num_bags = 2;
  LookupOutput o{out.data(), 2};
  auto expect_error = [&](const char* needle) {
    try {
      pooled_lookup(Backend::kCpu, {&f, 1}, {&o, 1});
      FAIL() << "no throw for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (float v : out) EXPECT_EQ(v, -7.0f) << "output written despite the error";
  };
  expect_error("offsets[2]");
  offsets = {0, 2, 5};  // past the ids
  expect_error("num_ids");
  offsets = {0, 2, 3};
  indices[2] = 4;  // past the rows
  expect_error("indices[2]");
  indices[2] = 3;
  f.row_stride = 1;
  expect_error("row_stride");
}

}  // namespace
}  // namespace dynemb

// AUC and log loss against O(n^2) / float64 references on fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "train/metrics.hpp"

namespace dynemb::train {
namespace {

double pairwise_auc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[i] > 0.5f && y[j] < 0.5f) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
      }
    }
  }
  return wins / pairs;
}

TEST(TrainMetrics, AucAndLogLossMatchReferences) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    const size_t n = 2 + rng() % 400;
    std::vector<float> s(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(rng() % 50) / 50.0f;  // many ties
      y[i] = static_cast<float>(rng() % 2);
    }
    y[0] = 1;
    y[1] = 0;
    EXPECT_NEAR(roc_auc(s, y), pairwise_auc(s, y), 1e-12);
    double ll = 0;
    for (size_t i = 0; i < n; ++i) {
      const double p = std::clamp(static_cast<double>(s[i]), 1e-7, 1 - 1e-7);
      ll -= y[i] > 0.5f ? std::log(p) : std::log(1 - p);
    }
    EXPECT_NEAR(log_loss(s, y), ll / n, 1e-9);
  }
  EXPECT_TRUE(std::isnan(roc_auc({0.1f, 0.2f}, {1, 1})));
}

// NaN scores (a diverged model) are left out and counted; +-inf rank as numbers. The reference
// is the pairwise AUC over the pairs without NaN.
TEST(TrainMetrics, NanScoresAreCountedAndLeftOut) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int round = 0; round < 50; ++round) {
    const size_t n = 2 + rng() % 300;
    std::vector<float> s(n), y(n), clean_s, clean_y;
    uint64_t nans = 0;
    for (size_t i = 0; i < n; ++i) {
      const unsigned kind = rng() % 8;
      s[i] = kind == 0 ? nan : kind == 1 ? inf : kind == 2 ? -inf : (rng() % 20) / 20.0f;
      y[i] = static_cast<float>(rng() % 2);
      if (std::isnan(s[i])) {
        ++nans;
      } else {
        clean_s.push_back(s[i]);
        clean_y.push_back(y[i]);
      }
    }
    uint64_t counted = 99, counted_ll = 99;
    const double auc = roc_auc(s, y, &counted);
    EXPECT_EQ(counted, nans);
    const auto clicks = std::count(clean_y.begin(), clean_y.end(), 1.0f);
    if (clicks == 0 || clicks == static_cast<std::ptrdiff_t>(clean_y.size())) {
      EXPECT_TRUE(std::isnan(auc));
    } else {
      EXPECT_NEAR(auc, pairwise_auc(clean_s, clean_y), 1e-12);
    }
    const double ll = log_loss(s, y, &counted_ll);
    EXPECT_EQ(counted_ll, nans);
    if (!clean_s.empty()) EXPECT_NEAR(ll, log_loss(clean_s, clean_y), 1e-12);
  }
  // All NaN: no AUC, no loss, no hang.
  uint64_t nans = 0;
  EXPECT_TRUE(std::isnan(roc_auc({nan, nan, nan}, {1, 0, 1}, &nans)));
  EXPECT_EQ(nans, 3u);
  EXPECT_TRUE(std::isnan(log_loss({nan}, {1})));
}

TEST(TrainMetrics, RunningAucKeepsTheLastWindow) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<float> s(1000), y(1000);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = static_cast<float>(rng() % 1000) / 1000.0f;
    y[i] = static_cast<float>(rng() % 2);
  }
  RunningAuc running(300);
  for (size_t i = 0; i < s.size(); i += 70)
    running.add(&s[i], &y[i], std::min<size_t>(70, s.size() - i));
  const std::vector<float> ls(s.end() - 300, s.end()), ly(y.end() - 300, y.end());
  EXPECT_EQ(running.count(), 300u);
  EXPECT_NEAR(running.value(), pairwise_auc(ls, ly), 1e-12);

  // Random chunk sizes, some larger than the window (a GPU batch is).
  RunningAuc ring(300);
  size_t done = 0;
  while (done < s.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 700, s.size() - done);
    ring.add(&s[done], &y[done], n);
    done += n;
    const size_t first = done > 300 ? done - 300 : 0;
    const std::vector<float> ws(s.begin() + first, s.begin() + done),
        wy(y.begin() + first, y.begin() + done);
    EXPECT_EQ(ring.count(), ws.size());
    const auto clicks = std::count(wy.begin(), wy.end(), 1.0f);
    if (clicks == 0 || clicks == static_cast<std::ptrdiff_t>(wy.size())) continue;  // no AUC
    EXPECT_NEAR(ring.value(), pairwise_auc(ws, wy), 1e-12) << "after " << done;
  }
}

}  // namespace
}  // namespace dynemb::train

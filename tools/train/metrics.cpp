#include "train/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "dynemb/core/error.hpp"
#include "train/stop_request.hpp"

namespace dynemb::train {

double roc_auc(const std::vector<float>& scores, const std::vector<float>& labels,
               uint64_t* nan_scores) {
  require(scores.size() == labels.size(), "roc_auc", "scores.size()", std::to_string(scores.size()),
          "must equal labels.size() = " + std::to_string(labels.size()));
  // NaN has no place in an order (a sort on it is undefined and a tie scan on it never ends):
  // such pairs are left out and counted. +-inf order as usual.
  std::vector<uint32_t> order;
  order.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!std::isnan(scores[i])) order.push_back(static_cast<uint32_t>(i));
  }
  if (nan_scores != nullptr) *nan_scores = scores.size() - order.size();
  throw_if_stop_requested("computing the AUC");
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney: sum of the (mid-)ranks of the positives.
  const size_t n = order.size();
  double positive_rank_sum = 0.0;
  size_t positives = 0;
  for (size_t i = 0; i < n;) {
    if ((i & 0xffff) == 0) throw_if_stop_requested("computing the AUC");
    size_t j = i + 1;  // every score equals itself: j moves past i at least
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double mid_rank = 0.5 * static_cast<double>(i + j + 1);  // ranks are 1-based
    for (size_t t = i; t < j; ++t) {
      if (labels[order[t]] > 0.5f) {
        positive_rank_sum += mid_rank;
        ++positives;
      }
    }
    i = j;
  }
  const size_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

double log_loss(const std::vector<float>& probs, const std::vector<float>& labels,
                uint64_t* nan_probs) {
  require(probs.size() == labels.size(), "log_loss", "probs.size()", std::to_string(probs.size()),
          "must equal labels.size() = " + std::to_string(labels.size()));
  double sum = 0.0;
  uint64_t used = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (std::isnan(probs[i])) continue;
    const double p = std::clamp(static_cast<double>(probs[i]), 1e-7, 1.0 - 1e-7);
    sum -= labels[i] > 0.5f ? std::log(p) : std::log(1.0 - p);
    ++used;
  }
  if (nan_probs != nullptr) *nan_probs = probs.size() - used;
  if (used == 0) return std::numeric_limits<double>::quiet_NaN();
  return sum / static_cast<double>(used);
}

RunningAuc::RunningAuc(size_t window)
    : probs_(std::max<size_t>(window, 1)), labels_(probs_.size()) {}

void RunningAuc::add(const float* probs, const float* labels, size_t n) {
  const size_t window = probs_.size();
  filled_ = std::min(window, filled_ + n);
  if (n > window) {  // only the last `window` count
    probs += n - window;
    labels += n - window;
    next_ = (next_ + n - window) % window;
    n = window;
  }
  // At most two contiguous pieces: up to the end of the ring, then from its start.
  const size_t first = std::min(n, window - next_);
  std::copy(probs, probs + first, probs_.begin() + static_cast<std::ptrdiff_t>(next_));
  std::copy(labels, labels + first, labels_.begin() + static_cast<std::ptrdiff_t>(next_));
  std::copy(probs + first, probs + n, probs_.begin());
  std::copy(labels + first, labels + n, labels_.begin());
  next_ = (next_ + n) % window;
}

double RunningAuc::value() const {
  if (filled_ == probs_.size()) return roc_auc(probs_, labels_);
  return roc_auc(std::vector<float>(probs_.begin(), probs_.begin() + filled_),
                 std::vector<float>(labels_.begin(), labels_.begin() + filled_));
}

}  // namespace dynemb::train

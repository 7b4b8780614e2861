// Classification metrics of predicted click probabilities: AUC, log loss, and a running AUC
// over the most recent training predictions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dynemb::train {

// Area under the ROC curve (ties count one half) over the pairs whose score is not NaN (+-inf
// rank last / first); NaN when only one class is left. The number of NaN scores left out goes
// to *nan_scores when given. Checks the stop request (Ctrl-C) on long inputs (Interrupted).
double roc_auc(const std::vector<float>& scores, const std::vector<float>& labels,
               uint64_t* nan_scores = nullptr);

// Mean log loss over the pairs whose probability is not NaN, probabilities clipped to
// [1e-7, 1 - 1e-7]; NaN when none is left. The number left out goes to *nan_probs when given.
double log_loss(const std::vector<float>& probs, const std::vector<float>& labels,
                uint64_t* nan_probs = nullptr);

// The AUC of the last `window` (probability, label) pairs added.
class RunningAuc {
 public:
  explicit RunningAuc(size_t window);
  // Adds n pairs.
  void add(const float* probs, const float* labels, size_t n);
  // The AUC over the window (NaN until both classes were seen; NaN probabilities left out).
  double value() const;
  // Pairs currently in the window.
  size_t count() const { return filled_; }

 private:
  std::vector<float> probs_, labels_;
  size_t next_ = 0, filled_ = 0;
};

}  // namespace dynemb::train

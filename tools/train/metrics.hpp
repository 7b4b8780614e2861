// Classification metrics of predicted click probabilities: AUC, log loss, and a running AUC
// over the most recent training predictions.
#pragma once

#include <cstddef>
#include <vector>

namespace dynemb::train {

// Area under the ROC curve (ties count one half); NaN when only one class is present.
double roc_auc(const std::vector<float>& scores, const std::vector<float>& labels);

// Mean log loss, probabilities clipped to [1e-7, 1 - 1e-7]; NaN for no samples.
double log_loss(const std::vector<float>& probs, const std::vector<float>& labels);

// The AUC of the last `window` (probability, label) pairs added.
class RunningAuc {
 public:
  explicit RunningAuc(size_t window);
  // Adds n pairs.
  void add(const float* probs, const float* labels, size_t n);
  // The AUC over the window (NaN until both classes were seen).
  double value() const;
  // Pairs currently in the window.
  size_t count() const { return filled_; }

 private:
  std::vector<float> probs_, labels_;
  size_t next_ = 0, filled_ = 0;
};

}  // namespace dynemb::train

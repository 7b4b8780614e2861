// The learning curve of a training run and its SVG plot.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dynemb::train {

// One evaluation during training.
struct CurvePoint {
  uint64_t samples = 0;         // training samples seen
  double seconds = 0.0;         // since the run started
  double eval_auc = 0.0;        // held-out AUC
  double eval_log_loss = 0.0;   // held-out log loss
  double train_auc = 0.0;       // running AUC of recent training predictions
  double train_log_loss = 0.0;  // mean training log loss since the previous point
  uint64_t rows = 0;            // rows in the table
  uint64_t evictions = 0;       // cumulative
};

// Writes an SVG with two panels: AUC (held-out, running training, and the ground truth as a
// dashed line when known) and log loss, both against samples seen. Throws Error if the file
// cannot be written.
void write_learning_curve_svg(const std::string& path, const std::vector<CurvePoint>& curve,
                              std::optional<double> ground_truth_auc, const std::string& title);

}  // namespace dynemb::train

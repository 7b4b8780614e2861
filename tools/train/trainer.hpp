// The training loop of `dynemb train`: stream -> FM steps -> progress, periodic evaluation and
// checkpoints -> final evaluation, metrics JSON and learning-curve plot.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "train/checkpoint_store.hpp"
#include "train/learning_curve.hpp"
#include "train/train_options.hpp"

namespace dynemb::train {

// What a run did.
struct TrainReport {
  TrainProgress progress;           // where the run ended (including a resumed part)
  uint64_t samples_this_run = 0;    // samples trained in this process
  double wall_seconds = 0.0;        // the whole run, setup and evaluation included
  double train_seconds = 0.0;       // the training steps only
  double samples_per_second = 0.0;  // samples_this_run / train_seconds
  double eval_auc = 0.0, eval_log_loss = 0.0;
  std::optional<double> ground_truth_auc, ground_truth_log_loss;  // synthetic data only
  uint64_t eval_samples = 0;
  uint64_t eval_nan_predictions = 0;  // held-out predictions that were NaN (left out of AUC)
  uint64_t rows = 0, evictions = 0, refused = 0, nonfinite_gradients = 0;
  bool interrupted = false;
  std::vector<CurvePoint> curve;
  std::string metrics_path, plot_path;
  std::string run_id;                    // of the run (kept across resumes)
  size_t incremental_dumps_removed = 0;  // other runs' / superseded deltas removed at start
};

// What a caller (the command, a test) can plug in.
struct TrainHooks {
  CheckpointStore* store = nullptr;  // nullptr: make_checkpoint_store() when checkpoints are used
  std::ostream* log = nullptr;       // progress and summary (nullptr: std::cerr)
  bool handle_signals = true;        // Ctrl-C / SIGTERM stop the run after the current step
  // Called with the model at the end of the run, before it is destroyed (tests inspect rows).
  std::function<void(FmModel&, const TrainReport&)> on_finish;
};

// Runs `options` (validated first) and returns the report; the metrics JSON and the plot are
// written before it returns. A stop request (Ctrl-C) ends the loop after the current step, then
// evaluates, writes the final checkpoint (with --checkpoint-dir) and the outputs as usual; one
// during setup or a second one while finishing throws Interrupted. A run that diverges (a loss
// or prediction not finite) throws Error naming the step, the loss and what to lower. A
// --checkpoint-dir holding another run is refused (InvalidArgument) unless --overwrite, and a
// resume whose settings differ from the checkpoint's is refused unless allowed
// (check_resume_compatible).
TrainReport run_training(const TrainOptions& options, const TrainHooks& hooks = {});

}  // namespace dynemb::train

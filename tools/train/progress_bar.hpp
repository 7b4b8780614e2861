// The training progress display: a redrawn bar on a terminal, or one line per update in a log.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace dynemb::train {

// What one update shows.
struct ProgressState {
  uint64_t samples = 0;
  uint64_t total = 0;    // 0: unknown (a file read to its end)
  double fraction = -1;  // >= 0: the bar shows this share of the input read (a file)
  double samples_per_second = 0.0;
  uint64_t rows = 0;
  uint64_t evictions = 0;
  double running_auc = 0.0;
  double elapsed_seconds = 0.0;
};

enum class ProgressStyle : uint8_t { kBar, kLines, kNone };

// "bar", "lines", "none"; "auto" is bar when `out` is a terminal (stderr), lines otherwise.
ProgressStyle parse_progress_style(const std::string& name);

class ProgressBar {
 public:
  ProgressBar(std::ostream& out, ProgressStyle style, double interval_seconds);
  // Shows `state` if the interval has passed since the last update (or `force`).
  void update(const ProgressState& state, bool force = false);
  // Ends the bar's line (a bar is redrawn in place until then).
  void finish();
  // True when the next update() would draw (lets callers skip computing the state).
  bool due() const;

 private:
  std::ostream& out_;
  ProgressStyle style_;
  double interval_;
  std::chrono::steady_clock::time_point last_;  // of the last update (or construction)
  bool drawn_ = false;
};

// "1.23M", "45.6K", "789".
std::string human_count(double value);

}  // namespace dynemb::train

#include "train/progress_bar.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ostream>

namespace dynemb::train {

std::string human_count(double v) {
  char buffer[32];
  if (v >= 1e9)
    std::snprintf(buffer, sizeof buffer, "%.2fG", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(buffer, sizeof buffer, "%.2fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buffer, sizeof buffer, "%.1fK", v / 1e3);
  else
    std::snprintf(buffer, sizeof buffer, "%.0f", v);
  return buffer;
}

ProgressStyle parse_progress_style(const std::string& name) {
  if (name == "bar") return ProgressStyle::kBar;
  if (name == "lines") return ProgressStyle::kLines;
  if (name == "none") return ProgressStyle::kNone;
  return isatty(STDERR_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLines;
}

ProgressBar::ProgressBar(std::ostream& out, ProgressStyle style, double interval_seconds)
    : out_(out),
      style_(style),
      interval_(interval_seconds),
      last_(std::chrono::steady_clock::now()) {}

bool ProgressBar::due() const {
  if (style_ == ProgressStyle::kNone) return false;
  const double since =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_).count();
  return since >= interval_;
}

void ProgressBar::update(const ProgressState& s, bool force) {
  if (style_ == ProgressStyle::kNone || (!force && !due())) return;
  last_ = std::chrono::steady_clock::now();
  drawn_ = true;
  std::string bar;
  const bool by_fraction = s.fraction >= 0;
  if (s.total > 0 || by_fraction) {
    const double fraction = by_fraction ? std::min(1.0, s.fraction)
                                        : std::min(1.0, static_cast<double>(s.samples) / s.total);
    const int width = 24, filled = static_cast<int>(fraction * width);
    bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3.0f%% ", fraction * 100);
    bar += pct;
    if (by_fraction) bar += "of the file | ";
  }
  char auc[32];
  if (std::isfinite(s.running_auc))
    std::snprintf(auc, sizeof auc, "%.4f", s.running_auc);
  else
    std::snprintf(auc, sizeof auc, "-");
  char eta[32] = "";
  if (by_fraction) {
    if (s.fraction > 0 && s.fraction < 1) {
      std::snprintf(eta, sizeof eta, " | eta %.0fs",
                    s.elapsed_seconds * (1 - s.fraction) / s.fraction);
    }
  } else if (s.total > 0 && s.samples_per_second > 0 && s.samples < s.total) {
    std::snprintf(eta, sizeof eta, " | eta %.0fs", (s.total - s.samples) / s.samples_per_second);
  }
  char line[256];
  std::snprintf(
      line, sizeof line, "%s%s%s samples | %s/s | rows %s | evicted %s | auc %s | %.0fs%s",
      bar.c_str(), human_count(static_cast<double>(s.samples)).c_str(),
      s.total > 0 && !by_fraction ? ("/" + human_count(static_cast<double>(s.total))).c_str() : "",
      human_count(s.samples_per_second).c_str(), human_count(static_cast<double>(s.rows)).c_str(),
      human_count(static_cast<double>(s.evictions)).c_str(), auc, s.elapsed_seconds, eta);
  if (style_ == ProgressStyle::kBar) {
    out_ << "\r" << line << "\x1b[K" << std::flush;
  } else {
    out_ << line << "\n" << std::flush;
  }
}

void ProgressBar::finish() {
  if (style_ == ProgressStyle::kBar && drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace dynemb::train

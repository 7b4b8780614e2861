// A stopwatch that adds the host time between its laps to phase counters (CachingPhaseTimes).
#pragma once

#include <chrono>
#include <cstdint>

namespace dynemb::storage::detail {

class PhaseClock {
 public:
  PhaseClock() : start_(std::chrono::steady_clock::now()), last_(start_) {}

  // Adds the time since the last lap (or the start) to `phase`.
  void lap(uint64_t& phase) {
    const auto now = std::chrono::steady_clock::now();
    phase += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count());
    last_ = now;
  }

  // Starts the next lap now without counting the time since the last one (a phase timed
  // elsewhere).
  void skip() { last_ = std::chrono::steady_clock::now(); }

  // Adds the time since the start to `total`.
  void total(uint64_t& total) const {
    total += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - start_)
                                       .count());
  }

 private:
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace dynemb::storage::detail

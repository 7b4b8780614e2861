// Timing of the sharded collection's stages (dedup, exchange, lookup, pool, backward).
#pragma once

#include <chrono>

#include "dynemb/core/memory.hpp"

namespace dynemb::dist {

using Clock = std::chrono::steady_clock;

// Seconds from a to b.
inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The time now; with `synchronize` on a GPU backend, after the device's queued work has
// finished, so that each stage's time is its own.
inline Clock::time_point stage_now(Backend backend, bool synchronize) {
  if (synchronize && backend != Backend::kCpu) backend_synchronize(backend);
  return Clock::now();
}

}  // namespace dynemb::dist

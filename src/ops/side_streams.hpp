// Streams that fork from a caller's stream and join back into it, so independent pieces of one
// step (a collection's per-table lookups) run side by side and the caller's stream still orders
// everything after them. A no-op on the CPU backend (one stream: the caller's).
#pragma once

#include <cstddef>
#include <vector>

#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"

namespace dynemb::detail {

class SideStreams {
 public:
  // `count` streams (CUDA, on `device`); none on the CPU.
  SideStreams(Backend backend, size_t count, int device);
  ~SideStreams();
  SideStreams(const SideStreams&) = delete;
  SideStreams& operator=(const SideStreams&) = delete;

  // Makes every side stream wait for the work issued to `main` so far.
  void fork(StreamHandle main);
  // Makes `main` wait for the work issued to every side stream so far.
  void join(StreamHandle main);
  // Side stream i % count (`main` when there are none).
  StreamHandle stream(size_t i, StreamHandle main) const {
    return streams_.empty() ? main : streams_[i % streams_.size()];
  }

 private:
  int device_;
  std::vector<StreamHandle> streams_;
  std::vector<void*> events_;  // one per side stream, then the fork's (last)
};

}  // namespace dynemb::detail

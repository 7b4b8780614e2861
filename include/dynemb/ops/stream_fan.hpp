// Side streams for independent work issued from one host thread: a collection's tables look up
// their keys at the same time (and, captured into a CUDA graph, as parallel branches).
#pragma once

#include <cstddef>

#include "dynemb/core/stream.hpp"

namespace dynemb::ops::detail {

class StreamFan {
 public:
  virtual ~StreamFan() = default;
  // Side streams (0 on the CPU backend, whose work runs on the calling thread anyway).
  virtual size_t size() const = 0;
  // Side stream i < size().
  virtual StreamHandle stream(size_t i) const = 0;
  // Work issued on any side stream after this waits for the work issued on `main` before it.
  virtual void fork(StreamHandle main) = 0;
  // Work issued on `main` after this waits for the work issued on every side stream before it.
  virtual void join(StreamHandle main) = 0;
};

}  // namespace dynemb::ops::detail

// `dynemb bench train --graph`: one training step captured into a CUDA graph and replayed.
#pragma once

#include <functional>
#include <memory>

#include "dynemb/core/stream.hpp"

namespace dynemb::bench {

class StepGraph {
 public:
  // Captures the work `issue` enqueues on `stream` (which must neither synchronize nor read
  // device memory on the host) into an executable graph. Throws CudaError when the work cannot
  // be captured, NotAvailable in a build without CUDA.
  StepGraph(StreamHandle stream, const std::function<void()>& issue);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Launches the captured work on `stream` (asynchronous).
  void replay(StreamHandle stream);
  // Kernels, copies and other nodes the graph holds.
  size_t nodes() const { return nodes_; }

 private:
  struct Handles;
  std::unique_ptr<Handles> handles_;
  size_t nodes_ = 0;
};

}  // namespace dynemb::bench

// A stream's one-kernel CUDA graphs for the fused query: a call of a shape seen before on the
// stream sets the kernel's parameters in that shape's instantiated graph and launches it, which
// takes about half the host time of a kernel launch (docs/cache.md, "What a small query costs").
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

namespace dynemb::cache::detail {

class StreamGraphs {
 public:
  StreamGraphs() = default;
  ~StreamGraphs();
  StreamGraphs(const StreamGraphs&) = delete;
  StreamGraphs& operator=(const StreamGraphs&) = delete;

  // Launches `kernel` (blocks x threads, no dynamic shared memory, parameters `args`) on
  // `stream` as its shape's graph (built on the shape's first call); false, with nothing
  // launched, where the graph cannot be built or launched (the caller then launches the kernel).
  bool launch(const void* kernel, unsigned blocks, unsigned threads, void** args,
              cudaStream_t stream);

  // Shapes kept at most (beyond: the caller launches the kernel).
  static constexpr size_t kMaxShapes = 16;

 private:
  struct Shape {
    const void* kernel;
    unsigned blocks, threads;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaGraphNode_t node;
  };
  std::mutex mutex_;  // held from setting a graph's parameters to its launch
  std::vector<Shape> shapes_;
};

}  // namespace dynemb::cache::detail

#include "bench/train/step_graph.hpp"

#include <string>

#include "dynemb/core/error.hpp"

#if defined(DYNEMB_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace dynemb::bench {

#if defined(DYNEMB_WITH_CUDA)
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("dynemb bench train --graph: ") + what + ": " +
                    cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
  }
}

}  // namespace

struct StepGraph::Handles {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

StepGraph::StepGraph(StreamHandle stream, const std::function<void()>& issue)
    : handles_(std::make_unique<Handles>()) {
  auto s = static_cast<cudaStream_t>(stream);
  // Relaxed: the step's host code may call APIs that are unsafe only for other threads' captures
  // (cudaStreamIsCapturing, attribute queries); this thread's own work is all on `stream`.
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  try {
    issue();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(s, &broken);
    if (broken != nullptr) cudaGraphDestroy(broken);
    cudaGetLastError();  // the capture's error, already reported by the exception
    throw;
  }
  check(cudaStreamEndCapture(s, &handles_->graph), "cudaStreamEndCapture");
  check(cudaGraphGetNodes(handles_->graph, nullptr, &nodes_), "cudaGraphGetNodes");
  // Node priorities kept: the backward's hot rows run on a high-priority branch beside its cold
  // rows' pass (docs/ops.md).
  const auto flags = static_cast<unsigned long long>(cudaGraphInstantiateFlagUseNodePriority);
  check(cudaGraphInstantiateWithFlags(&handles_->exec, handles_->graph, flags),
        "cudaGraphInstantiate");
  check(cudaGraphUpload(handles_->exec, s), "cudaGraphUpload");
}

StepGraph::~StepGraph() {
  if (handles_->exec != nullptr) cudaGraphExecDestroy(handles_->exec);
  if (handles_->graph != nullptr) cudaGraphDestroy(handles_->graph);
}

void StepGraph::replay(StreamHandle stream) {
  check(cudaGraphLaunch(handles_->exec, static_cast<cudaStream_t>(stream)), "cudaGraphLaunch");
}

#else

struct StepGraph::Handles {};

StepGraph::StepGraph(StreamHandle, const std::function<void()>&) {
  throw NotAvailable("dynemb bench train: --graph needs the CUDA backend; this build has none");
}

StepGraph::~StepGraph() = default;

void StepGraph::replay(StreamHandle) {}

#endif

}  // namespace dynemb::bench

#include "cuda/call_scratch.hpp"

namespace dynemb::table::cuda {

namespace {

CallState read_state(const CallState* state, cudaStream_t stream) {
  CallState host{};
  core::cuda::check(cudaMemcpyAsync(&host, state, sizeof host, cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync (call state)");
  core::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return host;
}

}  // namespace

WriteState::WriteState() {
  core::cuda::check(cudaMalloc(reinterpret_cast<void**>(&state_), sizeof(CallState)),
                    "cudaMalloc (write state)");
  launch_init_state(state_, 0, nullptr);
  core::cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (write state)");
}

WriteState::~WriteState() {
  if (state_ != nullptr) cudaFree(state_);
}

WriteState::Use::~Use() {
  // A failing launch here means the device is already failing: the next call reports it.
  try {
    launch_init_state(state_, 0, stream_);
  } catch (...) {
  }
}

CallState WriteState::Use::read() const {
  return read_state(state_, stream_);
}

CallState CallScratch::read() const {
  return read_state(state_.data(), stream_);
}

}  // namespace dynemb::table::cuda

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
  const uint64_t entries = uint64_t{1} << kJoinEntryBits;
  core::cuda::check(cudaMalloc(reinterpret_cast<void**>(&state_), sizeof(CallState)),
                    "cudaMalloc (write state)");
  core::cuda::check(
      cudaMalloc(reinterpret_cast<void**>(&joins_.tags), 2 * entries * sizeof(unsigned long long)),
      "cudaMalloc (copy join entries)");
  joins_.keys = joins_.tags + entries;
  joins_.entry_bits = kJoinEntryBits;
  // Epoch 0 and tags of epoch 0: every entry free; the first write runs at epoch 1.
  core::cuda::check(cudaMemset(state_, 0, sizeof(CallState)), "cudaMemset (write state)");
  core::cuda::check(cudaMemset(joins_.tags, 0, entries * sizeof(unsigned long long)),
                    "cudaMemset (copy join entries)");
  launch_init_state(state_, 0, nullptr, joins_);
  core::cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize (write state)");
}

WriteState::~WriteState() {
  if (state_ != nullptr) cudaFree(state_);
  if (joins_.tags != nullptr) cudaFree(joins_.tags);
}

WriteState::Use::~Use() {
  // A failing launch here means the device is already failing: the next call reports it.
  try {
    launch_init_state(state_, 0, stream_, joins_);
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

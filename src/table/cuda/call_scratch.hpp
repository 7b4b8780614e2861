// The call state of one call, on the device, that the host reads back where a call returns a
// count or may throw.
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda/check.hpp"
#include "core/cuda/device_array.hpp"
#include "table/cuda/device_layout.hpp"
#include "table/cuda/kernels.hpp"

namespace dynemb::cuda_table {

// The table's stream-ordered temporaries are core's.
using cuda::DeviceArray;

// One call's CallState on the device.
class CallScratch {
 public:
  // Allocates and initializes the state (budget as given) on `stream`.
  CallScratch(cudaStream_t stream, long long budget = 0) : stream_(stream), state_(1, stream) {
    launch_init_state(state_.data(), budget, stream);
  }
  CallState* get() const { return state_.data(); }
  // Copies the state to the host; synchronizes the stream.
  CallState read() const {
    CallState host{};
    cuda::check(cudaMemcpyAsync(&host, state_.data(), sizeof host, cudaMemcpyDeviceToHost, stream_),
                "cudaMemcpyAsync (call state)");
    cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return host;
  }

 private:
  cudaStream_t stream_;
  DeviceArray<CallState> state_;
};

}  // namespace dynemb::cuda_table

// Stream-ordered temporaries of one call: device arrays and the call state that the host reads
// back where a call returns a count or may throw.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "table/cuda/cuda_check.hpp"
#include "table/cuda/device_layout.hpp"
#include "table/cuda/kernels.hpp"

namespace dynemb::cuda_table {

// `count` elements of T, allocated and freed in the order of `stream` (cudaMallocAsync).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(size_t count, cudaStream_t stream) : stream_(stream) {
    check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&data_),
                               (count == 0 ? 1 : count) * sizeof(T), stream),
               "cudaMallocAsync (call scratch)");
  }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  DeviceArray(DeviceArray&& o) noexcept
      : stream_(o.stream_), data_(std::exchange(o.data_, nullptr)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(stream_, o.stream_);
    std::swap(data_, o.data_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return data_; }

 private:
  cudaStream_t stream_ = nullptr;
  T* data_ = nullptr;
};

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
    check_cuda(cudaMemcpyAsync(&host, state_.data(), sizeof host, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (call state)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return host;
  }

 private:
  cudaStream_t stream_;
  DeviceArray<CallState> state_;
};

}  // namespace dynemb::cuda_table

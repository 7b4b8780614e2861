// Stream-ordered device temporaries (allocated from dynemb's scratch pool, freed with
// cudaFreeAsync, on one stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/scratch_pool.hpp"

namespace dynemb::core::cuda {

// `count` elements of T on the current device, allocated and freed in the order of `stream`.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(size_t count, cudaStream_t stream) : stream_(stream), count_(count) {
    check(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&data_),
                                  (count == 0 ? 1 : count) * sizeof(T), scratch_pool(), stream),
          "cudaMallocFromPoolAsync (temporary)");
  }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  DeviceArray(DeviceArray&& o) noexcept
      : stream_(o.stream_), count_(o.count_), data_(std::exchange(o.data_, nullptr)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(stream_, o.stream_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  cudaStream_t stream_ = nullptr;
  size_t count_ = 0;
  T* data_ = nullptr;
};

// Copies one value from device memory to the host; synchronizes `stream`.
template <class T>
T read_value(const T* device_ptr, cudaStream_t stream, const char* what) {
  T host{};
  check(cudaMemcpyAsync(&host, device_ptr, sizeof(T), cudaMemcpyDeviceToHost, stream), what);
  sync(stream, what);
  return host;
}

}  // namespace dynemb::core::cuda

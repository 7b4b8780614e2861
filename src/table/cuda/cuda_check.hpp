// Checks CUDA runtime results: every failed call becomes a dynemb::CudaError naming the call.
#pragma once

#include <cuda_runtime_api.h>

namespace dynemb::cuda_table {

// Throws CudaError("<what>: <error name>: <error string>") unless status is cudaSuccess.
void check_cuda(cudaError_t status, const char* what);

// Makes `device` current for the guard's lifetime, then restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace dynemb::cuda_table

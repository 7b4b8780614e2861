#include "core/cuda/device_guard.hpp"

#include <cuda_runtime_api.h>

#include "core/cuda/check.hpp"

namespace dynemb::cuda {

DeviceGuard::DeviceGuard(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);
}

}  // namespace dynemb::cuda

#include "table/cuda/cuda_check.hpp"

#include <string>

#include "dynemb/core/error.hpp"
#include "table/backends.hpp"

namespace dynemb::cuda_table {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string(what) + ": " + cudaGetErrorName(status) + ": " +
                    cudaGetErrorString(status));
  }
}

DeviceGuard::DeviceGuard(int device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);
}

}  // namespace dynemb::cuda_table

namespace dynemb::detail {

bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  return count > 0;
}

}  // namespace dynemb::detail

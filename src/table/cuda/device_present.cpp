// Whether the CUDA backend has a device to run on (table/backends.hpp).
#include <cuda_runtime_api.h>

#include "backends.hpp"

namespace dynemb::table::detail {

bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return false;
  }
  return count > 0;
}

}  // namespace dynemb::table::detail

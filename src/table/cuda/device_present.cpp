// Whether, and how many, CUDA devices the CUDA backend can run on (table/backends.hpp).
#include <cuda_runtime_api.h>

#include "backends.hpp"

namespace dynemb::table::detail {

int cuda_devices_visible() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return 0;
  }
  return count;
}

bool cuda_device_present() {
  return cuda_devices_visible() > 0;
}

}  // namespace dynemb::table::detail

#include "dynemb/core/cuda/device_info.hpp"

#include <cuda_runtime_api.h>

#include "dynemb/core/cuda/check.hpp"

namespace dynemb::core::cuda {

uint32_t multiprocessors(int device) {
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
  return static_cast<uint32_t>(sms);
}

}  // namespace dynemb::core::cuda

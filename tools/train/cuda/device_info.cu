// The GPU's name and size for the metrics JSON.
#include <cuda_runtime_api.h>

#include "dynemb/core/error.hpp"
#include "train/gpu_kernels.hpp"

namespace dynemb::train::gpu {

DeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    throw Error(std::string("dynemb train: cudaGetDeviceProperties(") + std::to_string(device) +
                ") failed: " + cudaGetErrorString(e));
  }
  return {prop.name, static_cast<uint64_t>(prop.totalGlobalMem), prop.multiProcessorCount};
}

}  // namespace dynemb::train::gpu

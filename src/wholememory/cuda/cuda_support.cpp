// The CUDA runtime calls of the host-side code: devices, host registration, stream waits.
#include "cuda_support.hpp"

#include <cuda_runtime_api.h>

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::wholememory {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error here
    return 0;
  }
  return count;
}

int pick_device(int requested, uint32_t rank) {
  const int count = cuda_device_count();
  if (requested >= 0) {
    require(requested < count, "wholememory", "device", std::to_string(requested),
            "must be < the " + std::to_string(count) + " CUDA devices this process sees");
    return requested;
  }
  return count == 0 ? -1 : static_cast<int>(rank % static_cast<uint32_t>(count));
}

void register_host_memory(void* ptr, size_t bytes, int device) {
  const core::cuda::DeviceGuard on(device);
  int same_pointer = 0;
  core::cuda::check(
      cudaDeviceGetAttribute(&same_pointer, cudaDevAttrCanUseHostPointerForRegisteredMem, device),
      "wholememory: cudaDeviceGetAttribute(CanUseHostPointerForRegisteredMem)");
  if (same_pointer == 0) {
    throw NotAvailable("wholememory: device " + std::to_string(device) +
                       " cannot address registered host memory at its host address");
  }
  core::cuda::check(
      cudaHostRegister(ptr, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
      ("wholememory: cudaHostRegister of " + std::to_string(bytes) + " bytes").c_str());
}

void unregister_host_memory(void* ptr) noexcept {
  cudaHostUnregister(ptr);
}

DeviceScope::DeviceScope(int device) {
  if (device < 0) return;
  int current = 0;
  core::cuda::check(cudaGetDevice(&current), "wholememory: cudaGetDevice");
  if (current == device) return;
  core::cuda::check(cudaSetDevice(device), "wholememory: cudaSetDevice");
  previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void sync_stream(StreamHandle stream, int device) {
  const core::cuda::DeviceGuard on(device < 0 ? 0 : device);
  core::cuda::sync(static_cast<cudaStream_t>(stream), "wholememory: cudaStreamSynchronize");
}

}  // namespace dynemb::wholememory

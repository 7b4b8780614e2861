// Kernel launches through the driver's cuLaunchKernel, for the launches whose host time is most of
// a call's (docs/cache.md, "What a small query costs").
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>

namespace dynemb::cache::detail {

// The driver function of `kernel` (a __global__ function's address), or nullptr where the
// driver's cuLaunchKernel cannot be found (the caller then launches through the runtime).
CUfunction driver_function(const void* kernel);

// One kernel's driver functions, per device (a CUfunction belongs to one device's context),
// looked up on the device's first launch.
class DriverKernel {
 public:
  // `kernel`: a __global__ function's address.
  explicit DriverKernel(const void* kernel) : kernel_(kernel) {}
  // The kernel's function on `device` (the current device), or nullptr where the driver path is
  // unavailable (the caller then launches through the runtime).
  CUfunction on(int device);

 private:
  static constexpr int kDevices = 64;
  const void* kernel_;
  // 0: not looked up yet, 1: unavailable, else the CUfunction.
  std::array<std::atomic<uintptr_t>, kDevices> functions_{};
};

// Launches `function` on `stream` (blocks x threads, no dynamic shared memory) with `args` (a
// pointer to each parameter, in order); throws CudaError naming `what` if the launch fails.
void launch_through_driver(CUfunction function, unsigned blocks, unsigned threads, void** args,
                           cudaStream_t stream, const char* what);

}  // namespace dynemb::cache::detail

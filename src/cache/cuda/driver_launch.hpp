// Kernel launches through the driver's cuLaunchKernel, for the launches whose host time is most of
// a call's (docs/cache.md, "What a small query costs").
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace dynemb::cache::detail {

// The driver function of `kernel` (a __global__ function's address), or nullptr where the
// driver's cuLaunchKernel cannot be found (the caller then launches through the runtime).
CUfunction driver_function(const void* kernel);

// Launches `function` on `stream` (blocks x threads, no dynamic shared memory) with `args` (a
// pointer to each parameter, in order); throws CudaError naming `what` if the launch fails.
void launch_through_driver(CUfunction function, unsigned blocks, unsigned threads, void** args,
                           cudaStream_t stream, const char* what);

}  // namespace dynemb::cache::detail

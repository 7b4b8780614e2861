// CUDA runtime results as dynemb errors, shared by every CUDA part of the library.
#pragma once

#include <cuda_runtime_api.h>

namespace dynemb::core::cuda {

// Throws CudaError("<what>: <error name>: <error string>") unless status is cudaSuccess.
void check(cudaError_t status, const char* what);

// Throws CudaError naming `kernel` if the last launch failed.
void check_launch(const char* kernel);

// Synchronizes `stream`, throwing CudaError naming `what` on failure.
void sync(cudaStream_t stream, const char* what);

}  // namespace dynemb::core::cuda

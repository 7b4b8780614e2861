#include "dynemb/core/cuda/check.hpp"

#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb::core::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw CudaError(std::string(what) + ": " + cudaGetErrorName(status) + ": " +
                  cudaGetErrorString(status));
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

void sync(cudaStream_t stream, const char* what) {
  check(cudaStreamSynchronize(stream), what);
}

}  // namespace dynemb::core::cuda

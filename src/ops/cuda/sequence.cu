#include "core/cuda/check.hpp"
#include "ops/cuda/launch.cuh"

namespace dynemb::ops_cuda {
namespace {

__global__ void iota_kernel(uint32_t* out, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<uint32_t>(i);
}

}  // namespace

void fill_iota(uint32_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  iota_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(out, n);
  cuda::check_launch("fill_iota");
}

}  // namespace dynemb::ops_cuda

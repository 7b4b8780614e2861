// Error checks for the trainer's kernel launches.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb::train::gpu {

// Throws dynemb::Error naming `what` if the last launch failed.
inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    throw Error(std::string("dynemb train: CUDA launch of ") + what +
                " failed: " + cudaGetErrorString(e));
  }
}

// Blocks of `threads_per_block` covering `count` work items (at least 1).
inline unsigned blocks_for(size_t count, unsigned threads_per_block) {
  const size_t blocks = (count + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(blocks == 0 ? 1 : blocks);
}

}  // namespace dynemb::train::gpu

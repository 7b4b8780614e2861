// The 32 lanes of a warp sharing one row of the fused optimizer (apply_optimizer_on in
// include/dynemb/ops/optimizer.hpp): lane l updates elements l, l + 32, ..., so a warp reads
// and writes the row's embedding and state coalesced; row sums go by shuffle.
#pragma once

#include <cstdint>

#include "dynemb/ops/optimizer.hpp"

namespace dynemb::ops_cuda {

struct WarpLanes {
  uint32_t lane;
  __device__ uint32_t first() const { return lane; }
  __device__ uint32_t stride() const { return 32; }
  __device__ float sum(float v) const {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
  }
  __device__ void sync() const { __syncwarp(); }
  __device__ bool leader() const { return lane == 0; }
};

}  // namespace dynemb::ops_cuda

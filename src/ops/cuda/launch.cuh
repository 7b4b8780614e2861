// Launch shapes shared by the ops kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "dynemb/core/stream.hpp"

namespace dynemb::ops::cuda {

inline constexpr int kBlock = 256;
inline constexpr int kWarpsPerBlock = kBlock / 32;

// Blocks for one thread per item.
inline unsigned blocks_for_threads(size_t items) {
  return static_cast<unsigned>((items + kBlock - 1) / kBlock);
}

// Blocks for one warp per item.
inline unsigned blocks_for_warps(size_t items) {
  return static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

inline cudaStream_t as_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

// out[i] = i for i in [0, n), on `stream`.
void fill_iota(uint32_t* out, size_t n, cudaStream_t stream);

// bag_of[i] = b for each id i of bag b (offsets[b] <= i < offsets[b + 1]), ids i < num_ids, on
// `stream`. Offsets not yet checked are safe: what falls outside [0, num_ids) is not written.
void fill_bag_of(const int64_t* offsets, size_t num_bags, size_t num_ids, uint32_t* bag_of,
                 cudaStream_t stream);

// Lets the current device's default memory pool keep what it has grown to (release threshold:
// unlimited), so the ops' stream-ordered temporaries are not unmapped at every synchronization
// and mapped again by the next step. Once per device; cheap afterwards.
void keep_pool_memory(cudaStream_t stream);

// The global index of this thread's warp and its lane.
__device__ __forceinline__ size_t warp_index() {
  return (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
}
__device__ __forceinline__ uint32_t lane_index() {
  return threadIdx.x & 31u;
}

// One warp's share of fill_bag_of: bag_of[i] = b for the ids i of bag b, lanes on consecutive ids
// (ids outside [0, num_ids) are not written).
__device__ __forceinline__ void write_bag_of(const int64_t* offsets, size_t b, size_t num_ids,
                                             uint32_t* bag_of) {
  const int64_t begin = max(offsets[b], int64_t{0});
  const int64_t end = min(offsets[b + 1], static_cast<int64_t>(num_ids));
  for (int64_t i = begin + lane_index(); i < end; i += 32) bag_of[i] = static_cast<uint32_t>(b);
}

}  // namespace dynemb::ops::cuda

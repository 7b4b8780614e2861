// Small device helpers shared by the ops: iota, the bag of each id, the memory pool's release
// threshold, pinned host words, stream synchronization.
#include <atomic>
#include <cstdint>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "dynemb/core/cuda/check.hpp"

namespace dynemb::ops::cuda {
namespace {

__global__ void iota_kernel(uint32_t* out, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<uint32_t>(i);
}

// One warp per bag.
__global__ void bag_of_kernel(const int64_t* offsets, size_t num_bags, size_t num_ids,
                              uint32_t* bag_of) {
  const size_t b = warp_index();
  if (b < num_bags) write_bag_of(offsets, b, num_ids, bag_of);
}

}  // namespace

void fill_iota(uint32_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  iota_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(out, n);
  core::cuda::check_launch("fill_iota");
}

void fill_bag_of(const int64_t* offsets, size_t num_bags, size_t num_ids, uint32_t* bag_of,
                 cudaStream_t stream) {
  if (num_bags == 0 || num_ids == 0) return;
  bag_of_kernel<<<blocks_for_warps(num_bags), kBlock, 0, stream>>>(offsets, num_bags, num_ids,
                                                                   bag_of);
  core::cuda::check_launch("fill_bag_of");
}

void keep_pool_memory(cudaStream_t) {
  static std::atomic<uint64_t> done_devices{0};
  int device = 0;
  core::cuda::check(cudaGetDevice(&device), "keep_pool_memory: cudaGetDevice");
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (done_devices.load(std::memory_order_relaxed) & bit) != 0) return;
  cudaMemPool_t pool;
  core::cuda::check(cudaDeviceGetDefaultMemPool(&pool, device), "keep_pool_memory: default pool");
  uint64_t unlimited = UINT64_MAX;
  core::cuda::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &unlimited),
                    "keep_pool_memory: release threshold");
  done_devices.fetch_or(bit, std::memory_order_relaxed);
}

}  // namespace dynemb::ops::cuda

namespace dynemb::ops::detail {

void fill_iota_cuda(uint32_t* out, size_t n, StreamHandle stream) {
  ops::cuda::fill_iota(out, n, ops::cuda::as_stream(stream));
}

void* pinned_host_alloc_cuda(size_t bytes) {
  void* p = nullptr;
  core::cuda::check(cudaMallocHost(&p, bytes), "StepWorkspace: cudaMallocHost");
  return p;
}

void pinned_host_free_cuda(void* p) noexcept {
  if (p != nullptr) cudaFreeHost(p);
}

void sync_stream_cuda(StreamHandle stream) {
  core::cuda::sync(ops::cuda::as_stream(stream), "StepWorkspace");
}

}  // namespace dynemb::ops::detail

// Small device helpers shared by the ops: iota, the bag of each id, the memory pool's release
// threshold, pinned host words, stream synchronization, side streams.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"

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

namespace {

// Non-blocking side streams, an event for the fork and one per side stream for the join.
class CudaStreamFan final : public StreamFan {
 public:
  CudaStreamFan(size_t streams, int device, bool high_priority) : device_(device) {
    core::cuda::DeviceGuard guard(device_);
    int least = 0, greatest = 0;
    core::cuda::check(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                      "StreamFan: cudaDeviceGetStreamPriorityRange");
    streams_.resize(streams);
    joins_.resize(streams);
    for (size_t i = 0; i < streams; ++i) {
      core::cuda::check(cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking,
                                                     high_priority ? greatest : least),
                        "StreamFan: cudaStreamCreate");
      core::cuda::check(cudaEventCreateWithFlags(&joins_[i], cudaEventDisableTiming),
                        "StreamFan: cudaEventCreate");
    }
    core::cuda::check(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming),
                      "StreamFan: cudaEventCreate");
  }
  ~CudaStreamFan() override {
    core::cuda::DeviceGuard guard(device_);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
    for (cudaEvent_t e : joins_) cudaEventDestroy(e);
    cudaEventDestroy(fork_);
  }
  size_t size() const override { return streams_.size(); }
  StreamHandle stream(size_t i) const override { return streams_.at(i); }
  void fork(StreamHandle main) override {
    core::cuda::check(cudaEventRecord(fork_, ops::cuda::as_stream(main)), "StreamFan: fork");
    for (cudaStream_t s : streams_) {
      core::cuda::check(cudaStreamWaitEvent(s, fork_, 0), "StreamFan: fork wait");
    }
  }
  void join(StreamHandle main) override {
    for (size_t i = 0; i < streams_.size(); ++i) {
      core::cuda::check(cudaEventRecord(joins_[i], streams_[i]), "StreamFan: join");
      core::cuda::check(cudaStreamWaitEvent(ops::cuda::as_stream(main), joins_[i], 0),
                        "StreamFan: join wait");
    }
  }

 private:
  int device_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> joins_;
  cudaEvent_t fork_ = nullptr;
};

}  // namespace

bool stream_capturing_cuda(StreamHandle stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  core::cuda::check(cudaStreamIsCapturing(ops::cuda::as_stream(stream), &status),
                    "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

std::unique_ptr<StreamFan> make_stream_fan_cuda(size_t streams, int device, bool high_priority) {
  return std::make_unique<CudaStreamFan>(streams, device, high_priority);
}

void sync_stream_cuda(StreamHandle stream) {
  core::cuda::sync(ops::cuda::as_stream(stream), "StepWorkspace");
}

}  // namespace dynemb::ops::detail

// CUDA streams and events for SideStreams (src/ops/side_streams.hpp).
#include <cuda_runtime_api.h>

#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"
#include "ops/backends.hpp"

namespace dynemb::detail {

StreamHandle create_stream_cuda(int device) {
  cuda::DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
              "SideStreams: cudaStreamCreate");
  return s;
}

void destroy_stream_cuda(StreamHandle stream, int device) noexcept {
  cuda::DeviceGuard guard(device);
  cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

void* create_event_cuda(int device) {
  cuda::DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "SideStreams: cudaEventCreate");
  return e;
}

void destroy_event_cuda(void* event, int device) noexcept {
  cuda::DeviceGuard guard(device);
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void record_event_cuda(void* event, StreamHandle stream, int device) {
  cuda::DeviceGuard guard(device);
  cuda::check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
              "SideStreams: cudaEventRecord");
}

void wait_event_cuda(StreamHandle stream, void* event, int device) {
  cuda::DeviceGuard guard(device);
  cuda::check(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
      "SideStreams: cudaStreamWaitEvent");
}

}  // namespace dynemb::detail

#include "cuda/stream_order.hpp"

#include "dynemb/core/cuda/check.hpp"

namespace dynemb::table::cuda {

StreamOrder::StreamOrder(bool enabled) : enabled_(enabled) {
  if (enabled_) {
    core::cuda::check(cudaEventCreateWithFlags(&last_write_, cudaEventDisableTiming),
                      "cudaEventCreate (write order)");
  }
}

StreamOrder::~StreamOrder() {
  if (last_write_ != nullptr) cudaEventDestroy(last_write_);
  for (auto& [stream, event] : last_read_) cudaEventDestroy(event);
}

cudaEvent_t StreamOrder::event_for(cudaStream_t stream) {
  auto it = last_read_.find(stream);
  if (it != last_read_.end()) return it->second;
  cudaEvent_t event = nullptr;
  core::cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                    "cudaEventCreate (read order)");
  last_read_.emplace(stream, event);
  return event;
}

StreamOrder::Write::Write(StreamOrder& order, cudaStream_t stream)
    : order_(order), stream_(stream) {
  if (!order_.enabled_) return;
  lock_ = std::unique_lock<std::shared_mutex>(order_.lock_);
  if (order_.have_write_) {
    core::cuda::check(cudaStreamWaitEvent(stream_, order_.last_write_, 0), "cudaStreamWaitEvent");
  }
  std::lock_guard<std::mutex> events(order_.events_mutex_);
  for (auto& [other, event] : order_.last_read_) {
    if (other != stream_) {
      core::cuda::check(cudaStreamWaitEvent(stream_, event, 0), "cudaStreamWaitEvent");
    }
  }
}

StreamOrder::Write::~Write() {
  if (!order_.enabled_) return;
  if (cudaEventRecord(order_.last_write_, stream_) == cudaSuccess) order_.have_write_ = true;
}

StreamOrder::Read::Read(StreamOrder& order, cudaStream_t stream) : order_(order), stream_(stream) {
  if (!order_.enabled_) return;
  lock_ = std::shared_lock<std::shared_mutex>(order_.lock_);
  if (order_.have_write_) {
    core::cuda::check(cudaStreamWaitEvent(stream_, order_.last_write_, 0), "cudaStreamWaitEvent");
  }
}

StreamOrder::Read::~Read() {
  if (!order_.enabled_) return;
  try {
    std::lock_guard<std::mutex> events(order_.events_mutex_);
    cudaEventRecord(order_.event_for(stream_), stream_);
  } catch (...) {
    // An event that cannot be created leaves this reader unordered against later writers only
    // if the device is already failing; the next call reports that error.
  }
}

}  // namespace dynemb::table::cuda

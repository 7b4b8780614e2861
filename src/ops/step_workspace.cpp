#include "ops/step_workspace.hpp"

#include <cstdlib>
#include <new>

#include "ops/backends.hpp"

namespace dynemb::detail {

StepWorkspace::StepWorkspace(Backend backend, int device)
    : backend_(backend), device_(device), device_words_(backend, kHostWords, device) {
  const size_t bytes = kHostWords * sizeof(uint64_t);
  host_words_ = static_cast<uint64_t*>(backend == Backend::kCuda ? pinned_host_alloc_cuda(bytes)
                                                                 : std::malloc(bytes));
  if (host_words_ == nullptr) throw std::bad_alloc();
}

StepWorkspace::~StepWorkspace() {
  if (backend_ == Backend::kCuda) {
    pinned_host_free_cuda(host_words_);
  } else {
    std::free(host_words_);
  }
}

void* StepWorkspace::scratch(size_t bytes, StreamHandle stream) {
  if (scratch_.data() == nullptr || scratch_.size() < bytes) {
    if (scratch_.data() != nullptr && backend_ == Backend::kCuda) sync_stream_cuda(stream);
    scratch_ = BackendBuffer<uint8_t>();
    scratch_ = BackendBuffer<uint8_t>(backend_, bytes + bytes / 4 + 256, device_);
  }
  return scratch_.data();
}

uint32_t* StepWorkspace::bag_of(size_t n, StreamHandle stream) {
  if (bag_of_.data() == nullptr || bag_of_.size() < n) {
    if (bag_of_.data() != nullptr && backend_ == Backend::kCuda) sync_stream_cuda(stream);
    bag_of_ = BackendBuffer<uint32_t>();
    bag_of_ = BackendBuffer<uint32_t>(backend_, n + n / 4 + 64, device_);
  }
  return bag_of_.data();
}

const uint32_t* StepWorkspace::iota(size_t n, StreamHandle stream) {
  if (iota_.data() == nullptr || iota_.size() < n) {
    if (iota_.data() != nullptr && backend_ == Backend::kCuda) sync_stream_cuda(stream);
    iota_ = BackendBuffer<uint32_t>();
    iota_ = BackendBuffer<uint32_t>(backend_, n + n / 4 + 64, device_);
    iota_filled_ = 0;
  }
  if (iota_filled_ < iota_.size()) {
    if (backend_ == Backend::kCuda) {
      fill_iota_cuda(iota_.data(), iota_.size(), stream);
    } else {
      for (size_t i = 0; i < iota_.size(); ++i) iota_.data()[i] = static_cast<uint32_t>(i);
    }
    iota_filled_ = iota_.size();
  }
  return iota_.data();
}

}  // namespace dynemb::detail

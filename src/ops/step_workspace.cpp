#include "dynemb/ops/step_workspace.hpp"

#include <cstdlib>
#include <new>

#include "backends.hpp"

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

template <class T>
bool StepWorkspace::ensure(BackendBuffer<T>& buffer, size_t count, size_t slack,
                           StreamHandle stream) {
  if (buffer.data() != nullptr && buffer.size() >= count) return false;
  if (buffer.data() != nullptr && backend_ == Backend::kCuda) sync_stream_cuda(stream);
  buffer = BackendBuffer<T>();
  buffer = BackendBuffer<T>(backend_, count + count / 4 + slack, device_);
  return true;
}

void* StepWorkspace::scratch(size_t bytes, StreamHandle stream) {
  ensure(scratch_, bytes, 256, stream);
  return scratch_.data();
}

uint32_t* StepWorkspace::bag_of(size_t n, StreamHandle stream) {
  ensure(bag_of_, n, 64, stream);
  return bag_of_.data();
}

uint32_t* StepWorkspace::narrow_keys(size_t n, StreamHandle stream) {
  ensure(narrow_keys_, n, 64, stream);
  return narrow_keys_.data();
}

const uint32_t* StepWorkspace::iota(size_t n, StreamHandle stream) {
  if (ensure(iota_, n, 64, stream)) iota_filled_ = 0;
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

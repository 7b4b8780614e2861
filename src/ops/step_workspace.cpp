#include "dynemb/ops/step_workspace.hpp"

#include <new>

#include "dynemb/ops/ops_backend.hpp"

namespace dynemb::ops::detail {

StepWorkspace::StepWorkspace(Backend backend, int device)
    : ops_(&ops_backend(backend)),
      backend_(backend),
      device_(device),
      device_words_(backend, kHostWords, device) {
  host_words_ = static_cast<uint64_t*>(ops_->alloc_host_words(kHostWords * sizeof(uint64_t)));
  if (host_words_ == nullptr) throw std::bad_alloc();
}

StepWorkspace::~StepWorkspace() {
  ops_->free_host_words(host_words_);
}

template <class T>
bool StepWorkspace::ensure(BackendBuffer<T>& buffer, size_t count, size_t slack,
                           StreamHandle stream) {
  if (buffer.data() != nullptr && buffer.size() >= count) return false;
  if (buffer.data() != nullptr) ops_->sync(stream);
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
    ops_->fill_iota(iota_.data(), iota_.size(), stream);
    iota_filled_ = iota_.size();
  }
  return iota_.data();
}

}  // namespace dynemb::ops::detail

// Buffers in the memory a backend's tables read and write: host memory for the CPU backend,
// device memory for the CUDA backend. Lets code above the table stay backend-neutral.
#pragma once

#include <cstddef>
#include <utility>

#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"

namespace dynemb {

// Allocates `bytes` (64-byte aligned) in `backend`'s memory; throws on failure.
void* backend_alloc(Backend backend, size_t bytes, int device = 0);
// Frees what backend_alloc returned (nullptr is a no-op).
void backend_free(Backend backend, void* ptr) noexcept;
// Copies `bytes` from host memory into backend memory (synchronous).
void copy_to_backend(Backend backend, void* dst, const void* src_host, size_t bytes);
// Copies `bytes` from backend memory into host memory (synchronous).
void copy_from_backend(Backend backend, void* dst_host, const void* src, size_t bytes);
// Copies `bytes` between two buffers of backend memory, ordered on `stream` (asynchronous on
// CUDA).
void copy_within_backend(Backend backend, void* dst, const void* src, size_t bytes,
                         StreamHandle stream = nullptr);
// Sets `bytes` of backend memory to zero (asynchronous on `stream` for CUDA).
void backend_zero(Backend backend, void* ptr, size_t bytes, StreamHandle stream = nullptr);
// Waits for all work queued on the backend's device (no-op on CPU).
void backend_synchronize(Backend backend);

// An owning array of `T` in a backend's memory.
template <class T>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  // Allocates `count` elements (contents undefined).
  BackendBuffer(Backend backend, size_t count, int device = 0)
      : backend_(backend),
        count_(count),
        data_(static_cast<T*>(backend_alloc(backend, count * sizeof(T), device))) {}
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  BackendBuffer(BackendBuffer&& o) noexcept { swap(o); }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  ~BackendBuffer() { backend_free(backend_, data_); }

  T* data() const { return data_; }
  size_t size() const { return count_; }
  // Copies `count` elements from host memory into the buffer's start.
  void upload(const T* host, size_t count) {
    copy_to_backend(backend_, data_, host, count * sizeof(T));
  }
  // Copies `count` elements from the buffer's start into host memory.
  void download(T* host, size_t count) const {
    copy_from_backend(backend_, host, data_, count * sizeof(T));
  }

 private:
  void swap(BackendBuffer& o) noexcept {
    std::swap(backend_, o.backend_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }
  Backend backend_ = Backend::kCpu;
  size_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace dynemb

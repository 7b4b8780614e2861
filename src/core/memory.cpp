#include "dynemb/core/memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "dynemb/core/error.hpp"

#if defined(DYNEMB_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#endif

namespace dynemb {
namespace {

[[noreturn, maybe_unused]] void no_cuda(const char* what) {
  throw NotAvailable(std::string(what) + ": backend = cuda, but this build has no CUDA backend");
}

}  // namespace

void* backend_alloc(Backend backend, size_t bytes, int device) {
  if (bytes == 0) bytes = 64;
  if (backend == Backend::kCpu) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
#if defined(DYNEMB_WITH_CUDA)
  void* p = nullptr;
  {
    const core::cuda::DeviceGuard on_device(device);
    core::cuda::check(cudaMalloc(&p, bytes),
                      ("backend_alloc: cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  }
  return p;
#else
  (void)device;
  no_cuda("backend_alloc");
#endif
}

void backend_free(Backend backend, void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (backend == Backend::kCpu) {
    std::free(ptr);
    return;
  }
#if defined(DYNEMB_WITH_CUDA)
  cudaFree(ptr);
#endif
}

void copy_to_backend(Backend backend, void* dst, const void* src_host, size_t bytes) {
  if (bytes == 0) return;
  if (backend == Backend::kCpu) {
    std::memcpy(dst, src_host, bytes);
    return;
  }
#if defined(DYNEMB_WITH_CUDA)
  core::cuda::check(cudaMemcpy(dst, src_host, bytes, cudaMemcpyDefault),
                    "copy_to_backend: cudaMemcpy");
#else
  no_cuda("copy_to_backend");
#endif
}

void copy_from_backend(Backend backend, void* dst_host, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (backend == Backend::kCpu) {
    std::memcpy(dst_host, src, bytes);
    return;
  }
#if defined(DYNEMB_WITH_CUDA)
  core::cuda::check(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDefault),
                    "copy_from_backend: cudaMemcpy");
#else
  no_cuda("copy_from_backend");
#endif
}

void copy_within_backend(Backend backend, void* dst, const void* src, size_t bytes,
                         StreamHandle stream) {
  if (bytes == 0) return;
  if (backend == Backend::kCpu) {
    std::memmove(dst, src, bytes);
    return;
  }
#if defined(DYNEMB_WITH_CUDA)
  core::cuda::check(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
      "copy_within_backend: cudaMemcpyAsync");
#else
  (void)stream;
  no_cuda("copy_within_backend");
#endif
}

void backend_zero(Backend backend, void* ptr, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  if (backend == Backend::kCpu) {
    std::memset(ptr, 0, bytes);
    return;
  }
#if defined(DYNEMB_WITH_CUDA)
  core::cuda::check(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream)),
                    "backend_zero: cudaMemsetAsync");
#else
  (void)stream;
  no_cuda("backend_zero");
#endif
}

void backend_synchronize(Backend backend) {
  if (backend == Backend::kCpu) return;
#if defined(DYNEMB_WITH_CUDA)
  core::cuda::check(cudaDeviceSynchronize(), "backend_synchronize: cudaDeviceSynchronize");
#else
  no_cuda("backend_synchronize");
#endif
}

}  // namespace dynemb

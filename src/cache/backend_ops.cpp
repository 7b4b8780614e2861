#include <cstring>

#include "backends.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::cache::detail {
namespace {

[[noreturn, maybe_unused]] void no_cuda(const char* what) {
  throw NotAvailable(std::string(what) + ": backend = cuda, but this build has no CUDA backend");
}

}  // namespace

void scatter_rows(Backend backend, size_t n, const uint64_t* positions, const float* rows,
                  uint32_t dim, float* out, StreamHandle stream) {
  if (backend == Backend::kCpu) {
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(out + positions[i] * dim, rows + i * dim, dim * sizeof(float));
    }
    return;
  }
#if defined(DYNEMB_WITH_CUDA)
  scatter_rows_cuda(n, positions, rows, dim, out, stream);
#else
  (void)stream;
  no_cuda("scatter_rows");
#endif
}

void copy_async(Backend backend, void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  if (backend == Backend::kCpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(DYNEMB_WITH_CUDA)
  copy_async_cuda(dst, src, bytes, stream);
#else
  (void)stream;
  no_cuda("copy_async");
#endif
}

void sync_stream(Backend backend, StreamHandle stream) {
  if (backend == Backend::kCpu) return;
#if defined(DYNEMB_WITH_CUDA)
  sync_stream_cuda(stream);
#else
  (void)stream;
  no_cuda("sync_stream");
#endif
}

}  // namespace dynemb::cache::detail

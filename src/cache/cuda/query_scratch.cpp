#include "cuda/query_scratch.hpp"

#include "dynemb/core/cuda/check.hpp"

namespace dynemb::cache::detail {

QueryScratch::~QueryScratch() {
  for (const auto& [id, buffer] : buffers_) cudaFree(buffer);
}

TileStatus* QueryScratch::for_stream(cudaStream_t stream) {
  unsigned long long id = 0;
  if (cudaStreamGetId(stream, &id) != cudaSuccess) {
    cudaGetLastError();  // not left for the launch check; the caller allocates instead
    return nullptr;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [known, buffer] : buffers_) {
    if (known == id) return buffer;
  }
  if (buffers_.size() >= kMaxStreams) return nullptr;
  void* p = nullptr;
  dynemb::core::cuda::check(cudaMalloc(&p, sizeof(TileStatus) * entries_),
                            "EmbeddingCache::query: cudaMalloc (tile counts)");
  // Zero tags: no call's tag (a bijective mix of a nonzero stamp) is expected to be 0, and a
  // stale tag of another call never equals this call's.
  const cudaError_t cleared = cudaMemset(p, 0, sizeof(TileStatus) * entries_);
  if (cleared != cudaSuccess) {
    cudaFree(p);
    dynemb::core::cuda::check(cleared, "EmbeddingCache::query: cudaMemset (tile counts)");
  }
  buffers_.emplace_back(id, static_cast<TileStatus*>(p));
  return static_cast<TileStatus*>(p);
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();  // not left for the next launch check to see
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace dynemb::cache::detail

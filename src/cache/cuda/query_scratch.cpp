#include "cuda/query_scratch.hpp"

#include "dynemb/core/cuda/check.hpp"

namespace dynemb::cache::detail {

QueryScratch::~QueryScratch() {
  for (Entry& e : buffers_) {
    e.graphs.reset();
    cudaFree(e.buffer);
  }
}

QueryScratch::ForStream QueryScratch::for_stream(cudaStream_t stream) {
  unsigned long long id = 0;
  if (cudaStreamGetId(stream, &id) != cudaSuccess) {
    cudaGetLastError();  // not left for the launch check; the caller allocates instead
    return {};
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const Entry& e : buffers_) {
    if (e.id == id) return {e.buffer, e.graphs.get()};
  }
  if (buffers_.size() >= kMaxStreams) return {};
  void* p = nullptr;
  const size_t bytes = sizeof(TileStatus) * (entries_ + 1);
  dynemb::core::cuda::check(cudaMalloc(&p, bytes),
                            "EmbeddingCache::query: cudaMalloc (tile counts)");
  // Zero tags (no call's tag is 0) and a zero arrival word, in the stream's order: a plain
  // cudaMemset runs on the legacy stream, which a non-blocking stream does not wait for, so the
  // stream's first query could read the buffer before it was cleared.
  const cudaError_t cleared = cudaMemsetAsync(p, 0, bytes, stream);
  if (cleared != cudaSuccess) {
    cudaFree(p);
    dynemb::core::cuda::check(cleared, "EmbeddingCache::query: cudaMemset (tile counts)");
  }
  buffers_.push_back({id, static_cast<TileStatus*>(p), std::make_unique<StreamGraphs>()});
  return {buffers_.back().buffer, buffers_.back().graphs.get()};
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

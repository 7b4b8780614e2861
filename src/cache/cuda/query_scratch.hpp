// The fused query's tile counts, kept per stream: a query on a stream the cache has seen takes
// its scratch from here instead of allocating (docs/cache.md, "Calls").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/kernels.hpp"

namespace dynemb::cache::detail {

class QueryScratch {
 public:
  // Buffers of `entries` TileStatus each (the most blocks a fused query launches), then the
  // arrival word of the unordered fused query.
  explicit QueryScratch(uint32_t entries) : entries_(entries) {}
  ~QueryScratch();
  QueryScratch(const QueryScratch&) = delete;
  QueryScratch& operator=(const QueryScratch&) = delete;

  // The buffer of `stream` (allocated on its first use, kept until the cache goes), or nullptr
  // once kMaxStreams streams have one (or when the stream's id cannot be read). Calls on one stream
  // run one after another on the device, so they share its buffer; the call tag tells their counts
  // apart.
  TileStatus* for_stream(cudaStream_t stream);
  // TileStatus entries per buffer.
  uint32_t entries() const { return entries_; }

  // Streams that get a buffer at most (beyond: the caller allocates per call).
  static constexpr size_t kMaxStreams = 64;

 private:
  uint32_t entries_;
  std::mutex mutex_;
  // (cudaStreamGetId, buffer): stream ids are never reused, unlike stream handles.
  std::vector<std::pair<unsigned long long, TileStatus*>> buffers_;
};

// True when `stream` is being captured into a CUDA graph (or its capture state is unknown).
bool stream_is_capturing(cudaStream_t stream);

}  // namespace dynemb::cache::detail

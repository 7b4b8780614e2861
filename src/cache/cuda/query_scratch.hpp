// The fused query's tile counts, kept per stream: a query on a stream the cache has seen takes
// its scratch from here instead of allocating (docs/cache.md, "Calls").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/kernels.hpp"
#include "cuda/query_graphs.hpp"

namespace dynemb::cache::detail {

class QueryScratch {
 public:
  // Buffers of `entries` TileStatus each (the most blocks a fused query launches), then the
  // arrival word of the unordered fused query.
  explicit QueryScratch(uint32_t entries) : entries_(entries) {}
  ~QueryScratch();
  QueryScratch(const QueryScratch&) = delete;
  QueryScratch& operator=(const QueryScratch&) = delete;

  // What the cache keeps for one stream.
  struct ForStream {
    TileStatus* status = nullptr;    // the stream's tile counts, then its arrival word
    StreamGraphs* graphs = nullptr;  // the stream's query graphs
  };
  // The scratch of `stream` (allocated on its first use, kept until the cache goes), or nullptrs
  // once kMaxStreams streams have one (or when the stream's id cannot be read). Calls on one stream
  // run one after another on the device, so they share its buffer; the call tag tells their counts
  // apart.
  ForStream for_stream(cudaStream_t stream);
  // TileStatus entries per buffer.
  uint32_t entries() const { return entries_; }

  // Streams that get a buffer at most (beyond: the caller allocates per call).
  static constexpr size_t kMaxStreams = 64;

 private:
  uint32_t entries_;
  std::mutex mutex_;
  struct Entry {
    unsigned long long id;  // cudaStreamGetId: never reused, unlike stream handles
    TileStatus* buffer;
    std::unique_ptr<StreamGraphs> graphs;
  };
  std::vector<Entry> buffers_;
};

// True when `stream` is being captured into a CUDA graph (or its capture state is unknown).
bool stream_is_capturing(cudaStream_t stream);

}  // namespace dynemb::cache::detail

// A WholeMemory embedding: a 2-D float tensor whose row r is [embedding (dim) | optimizer
// state] of dense id r, read by gathering rows and trained by the fused sparse optimizers of the
// ops part, applied by each row's owner to gradients routed to it (docs/wholememory.md,
// "Embedding").
#pragma once

#include <cstdint>
#include <memory>

#include "dynemb/core/initializer.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/wholememory/tensor.hpp"

namespace dynemb::wholememory {

struct WholeEmbeddingOptions {
  uint64_t rows = 0;  // dense ids [0, rows)
  uint32_t dim = 0;   // embedding floats per row
  OptimizerOptions optimizer{};
  // Row r starts as the initializer's row of key r (the same rows an Embedding of int64 keys
  // draws); optimizer state starts at 0.
  InitializerOptions initializer{};
  MemoryType type = MemoryType::kContinuous;
  MemoryLocation location = MemoryLocation::kHost;
  int device = -1;  // as MemoryOptions::device
  // A private cache on every rank of cache_ratio * rows rows (0: none; at most 1) in the memory
  // of cache_executor, used by lookups with that executor: a device cache of a host-located
  // embedding, or a local cache of a distributed one. Kept coherent with apply_gradients;
  // invalidate_cache() after writing the tensor any other way.
  double cache_ratio = 0.0;
  Executor cache_executor = Backend::kCuda;
};

// A rank's cache counts since construction.
struct WholeEmbeddingCacheStats {
  uint64_t slots = 0;
  uint64_t hits = 0;         // looked-up rows served by the cache
  uint64_t misses = 0;       // looked-up rows gathered from the tensor (then cached)
  uint64_t invalidated = 0;  // cached rows dropped because a gradient step changed them
};

class RowCache;

// Throws InvalidArgument naming the bad field, its value and its limit.
void validate_whole_embedding_options(const WholeEmbeddingOptions& options);

class WholeEmbedding {
 public:
  // Collective: creates the tensor {rows, dim + optimizer state} and fills each rank's part
  // (the options must agree on every rank: InvalidArgument naming the ranks otherwise).
  WholeEmbedding(dist::Communicator& comm, const WholeEmbeddingOptions& options);
  ~WholeEmbedding();

  const WholeEmbeddingOptions& options() const { return options_; }
  WholeTensor& tensor() { return tensor_; }
  const WholeTensor& tensor() const { return tensor_; }
  // Floats per tensor row: dim + the optimizer's state.
  uint32_t row_floats() const { return row_floats_; }

  // out row i (dim floats, dense) = the embedding of id indices[i]. As gather: local for
  // continuous and chunked, collective for distributed; indices and out in `executor`'s memory.
  // With a cache and executor == cache_executor, cached rows are read from the cache and the
  // others gathered and cached (the indices are read on the host).
  void lookup(const int64_t* indices, size_t n, float* out, Executor executor,
              StreamHandle stream = nullptr) const;

  // Collective (every rank, its own batch): gradient row i (dim floats, dense) belongs to id
  // indices[i]. Each id's gradients from every rank are summed (in rank order, then batch order)
  // and the optimizer applied once to its row by the rank owning it. InvalidArgument on every
  // rank, with no row changed, when any index is out of range. Returns the distinct rows this
  // rank updated.
  uint64_t apply_gradients(const int64_t* indices, size_t n, const float* grads, Executor executor,
                           StreamHandle stream = nullptr);

  // Drops every cached row of this rank (after writing the tensor other than by
  // apply_gradients, or loading it from files).
  void invalidate_cache();
  WholeEmbeddingCacheStats cache_stats() const { return cache_stats_; }

 private:
  WholeEmbeddingOptions options_;
  uint32_t row_floats_;
  WholeTensor tensor_;
  std::unique_ptr<RowCache> cache_;
  mutable WholeEmbeddingCacheStats cache_stats_;
};

}  // namespace dynemb::wholememory

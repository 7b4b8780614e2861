// The constructors of each backend's cache and the backend-specific helpers of the lookup path,
// called only from inside the cache part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dynemb/cache/embedding_cache.hpp"

namespace dynemb::cache::detail {

// Builds the CPU cache (src/cache/cpu).
template <CacheKey K>
std::unique_ptr<EmbeddingCache<K>> make_cpu_cache(const CacheOptions<K>& options,
                                                  const CacheFootprint& footprint);

// Builds the CUDA cache (src/cache/cuda); only linked when the CUDA backend is built.
template <CacheKey K>
std::unique_ptr<EmbeddingCache<K>> make_cuda_cache(const CacheOptions<K>& options,
                                                   const CacheFootprint& footprint);

// out[positions[i]] = rows[i] for i < n, rows of `dim` floats (CUDA: device memory, on stream).
void scatter_rows_cuda(size_t n, const uint64_t* positions, const float* rows, uint32_t dim,
                       float* out, void* stream);
// cudaMemcpyAsync of `bytes` on `stream` (any direction).
void copy_async_cuda(void* dst, const void* src, size_t bytes, void* stream);
// cudaStreamSynchronize.
void sync_stream_cuda(void* stream);

// The same three on either backend (the CPU ones run at once).
void scatter_rows(Backend backend, size_t n, const uint64_t* positions, const float* rows,
                  uint32_t dim, float* out, StreamHandle stream);
void copy_async(Backend backend, void* dst, const void* src, size_t bytes, StreamHandle stream);
void sync_stream(Backend backend, StreamHandle stream);

}  // namespace dynemb::cache::detail

// Launchers of the CUDA cache's kernels (src/cache/cuda/*.cu), called by CudaCache.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/view.hpp"

namespace dynemb::cache::detail {

// Queries n keys: rows of hits to values, missed[i] = 1 for a miss, stamps hits with `stamp`.
template <class K>
void launch_query(const CacheView<K>& view, size_t n, const K* keys, float* values, uint8_t* missed,
                  uint64_t stamp, uint32_t grid_limit, cudaStream_t stream);

// Writes the flagged keys and their positions compactly in batch order, *miss_count, and adds
// the call's hits and misses to the counters.
template <class K>
void launch_compact_misses(const CacheView<K>& view, size_t n, const K* keys, const uint8_t* missed,
                           K* missing_keys, uint64_t* missing_positions, uint64_t* miss_count,
                           cudaStream_t stream);

// What a write kernel does with each key.
enum class WriteKind : uint8_t { kReplace, kUpdate, kErase };

// Replaces, updates or erases n keys (values unused for erase); replace stamps key i with
// base_stamp + i.
template <class K>
void launch_write(const CacheView<K>& view, WriteKind kind, size_t n, const K* keys,
                  const float* values, uint64_t base_stamp, uint32_t grid_limit,
                  cudaStream_t stream);

// Empties every set (under its lock).
template <class K>
void launch_clear(const CacheView<K>& view, cudaStream_t stream);

// The first position whose key equals empty_key, or UINT64_MAX (synchronizes).
template <class K>
uint64_t find_sentinel(size_t n, const K* keys, K empty_key, cudaStream_t stream);

// Stored keys (synchronizes).
template <class K>
uint64_t count_stored(const CacheView<K>& view, cudaStream_t stream);

// Copies the stored keys and rows of sets [first_set, first_set + num_sets) compactly in slot
// order; returns how many (synchronizes).
template <class K>
uint64_t dump_sets(const CacheView<K>& view, uint64_t first_set, uint64_t num_sets, K* keys,
                   float* values, cudaStream_t stream);

// out[positions[i]] = rows[i] for i < n.
void launch_scatter_rows(size_t n, const uint64_t* positions, const float* rows, uint32_t dim,
                         float* out, cudaStream_t stream);

}  // namespace dynemb::cache::detail

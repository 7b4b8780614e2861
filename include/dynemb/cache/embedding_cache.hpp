// The inference embedding cache: a fixed-size, read-mostly, set-associative store of hot rows
// with least-recently-used replacement, queried by many threads at once. One interface, a CPU and
// a CUDA implementation behind it. docs/cache.md states every promise in full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dynemb/cache/cache_options.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"

namespace dynemb::cache {

// Cumulative counts since construction (clear() does not reset them).
struct CacheStats {
  uint64_t hits = 0;           // query keys found (each copy of a repeated key counts)
  uint64_t misses = 0;         // query keys not found
  uint64_t inserted = 0;       // keys replace() stored that were not stored before
  uint64_t evicted = 0;        // stored rows replace() overwrote with another key (LRU victims)
  uint64_t refreshed = 0;      // stored keys whose row replace() or update() overwrote
  uint64_t erased = 0;         // keys erase() removed
  uint64_t sentinel_keys = 0;  // input keys equal to empty_key, skipped (validate_keys off)
  // hits / (hits + misses), 0 before the first query.
  double hit_rate() const {
    return hits + misses == 0 ? 0.0
                              : static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
};

// A cache of key -> float row of `dim`. Every key may live in one of two candidate sets of `ways`
// slots (cache_sets.hpp); each slot has an access stamp, and a full pair of sets gives up its least
// recently used row. Keys in the cache are unique.
//
// Pointers are host memory for the CPU backend and device-accessible memory for the CUDA backend,
// where calls are ordered on `stream` and return before the work is done unless they say they
// synchronize. Value buffers are row-major [n x dim]. Calls are safe from many threads at once:
// queries take no lock (CUDA: a per-set version is checked around each read) and do not wait for
// one another; writers lock the two candidate sets of each key.
template <CacheKey K>
class EmbeddingCache {
 public:
  using key_type = K;
  virtual ~EmbeddingCache() = default;

  // For each key: a stored key's row is copied to values[i] and the key becomes the most recently
  // used; a missing key goes to missing_keys and its batch position to missing_positions, compactly
  // in batch order, and *miss_count receives how many were missing. values[i] of a missing key is
  // left as it was. Repeated keys are allowed and each copy is answered (and counted).
  virtual void query(size_t n, const K* keys, float* values, K* missing_keys,
                     uint64_t* missing_positions, uint64_t* miss_count,
                     StreamHandle stream = nullptr) = 0;

  // Stores each (key, row): a stored key's row is overwritten, a new key takes a free slot of
  // the emptier candidate set or, when both are full, the least recently used slot of the two.
  // Every key becomes the most recently used, in batch order; for a repeated key the last copy's
  // row wins.
  virtual void replace(size_t n, const K* keys, const float* values,
                       StreamHandle stream = nullptr) = 0;

  // Overwrites the rows of stored keys (recency unchanged); missing keys are ignored. For a
  // repeated key one of its copies' rows is kept.
  virtual void update(size_t n, const K* keys, const float* values,
                      StreamHandle stream = nullptr) = 0;

  // Removes the stored keys among keys[0, n).
  virtual void erase(size_t n, const K* keys, StreamHandle stream = nullptr) = 0;

  // Copies out the keys and rows stored in sets [first_set, first_set + num_sets), compactly, in
  // slot order; returns how many (synchronizes). keys and values hold num_sets * ways entries.
  // A dump is not atomic with respect to writers running at the same time.
  virtual size_t dump(uint64_t first_set, uint64_t num_sets, K* keys, float* values,
                      StreamHandle stream = nullptr) = 0;

  // Empties the cache and stores a whole table of n distinct keys; n must not exceed
  // footprint().rows. Returns how many rows did not fit and were evicted by later ones
  // (synchronizes; 0 unless the two-set placement overflowed, counted in stats().evicted).
  virtual size_t preload(size_t n, const K* keys, const float* values,
                         StreamHandle stream = nullptr) = 0;

  // Removes every key (capacity kept).
  virtual void clear(StreamHandle stream = nullptr) = 0;

  // Number of stored keys (synchronizes).
  virtual size_t size(StreamHandle stream = nullptr) const = 0;

  // The counters (synchronizes the device on CUDA).
  virtual CacheStats stats() const = 0;

  // The options the cache was made with and the layout it allocated.
  virtual const CacheOptions<K>& options() const = 0;
  virtual const CacheFootprint& footprint() const = 0;
  virtual Backend backend() const = 0;

  // Floats per row.
  uint32_t dim() const { return options().dim; }
  // Sets of options().ways slots.
  uint64_t num_sets() const { return footprint().sets; }
};

// Builds a cache on `backend`; throws InvalidArgument for bad options (cache_footprint),
// OutOfMemory when the footprint exceeds cache_memory_available, NotAvailable for a backend not
// built in.
template <CacheKey K>
std::unique_ptr<EmbeddingCache<K>> make_cache(Backend backend, const CacheOptions<K>& options);

}  // namespace dynemb::cache

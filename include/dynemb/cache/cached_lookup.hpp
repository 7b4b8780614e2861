// The serving lookup path: query the cache, read what it misses from a MissSource, fill the
// output, and put the fetched rows into the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "dynemb/cache/embedding_cache.hpp"
#include "dynemb/cache/miss_source.hpp"

namespace dynemb::cache {

struct LookupOptions {
  // Fetched rows go into the cache when the call's hit rate is below this, in [0, 1]; 1 (the
  // default) inserts whenever anything missed, 0 never inserts.
  double replace_below_hit_rate = 1.0;
  // The row given to keys that neither the cache nor the source has.
  float absent_fill = 0.0f;
};

// What one lookup did.
struct LookupResult {
  size_t hits = 0;         // keys the cache answered
  size_t fetched = 0;      // keys the source answered
  size_t absent = 0;       // keys neither had (their rows hold absent_fill)
  size_t source_keys = 0;  // distinct keys asked of the source (a repeated miss is asked once)
  bool replaced = false;   // whether the fetched rows were put into the cache
};

// One caller's lookup path over a shared cache and source (use one per thread: it keeps staging
// buffers between calls; the cache itself is shared safely).
template <CacheKey K>
class CachedLookup {
 public:
  // Throws InvalidArgument when the source's dim differs from the cache's, or an option is bad.
  CachedLookup(EmbeddingCache<K>& cache, MissSource<K>& source, LookupOptions options = {});
  ~CachedLookup();
  CachedLookup(const CachedLookup&) = delete;
  CachedLookup& operator=(const CachedLookup&) = delete;

  // values[i] = the row of keys[i], from the cache, else from the source, else absent_fill (keys
  // and values in the cache's backend memory). On CUDA the call waits for the query's misses,
  // fetches them on the host, and returns with the copy of their rows into values and their
  // insertion into the cache queued on `stream`.
  LookupResult lookup(size_t n, const K* keys, float* values, StreamHandle stream = nullptr);

 private:
  struct Staging;
  EmbeddingCache<K>& cache_;
  MissSource<K>& source_;
  LookupOptions options_;
  std::unique_ptr<Staging> staging_;
};

}  // namespace dynemb::cache

#include "dynemb/cache/cached_lookup.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends.hpp"
#include "dynemb/core/error.hpp"
#include "dynemb/core/memory.hpp"

namespace dynemb::cache {

// Buffers in the cache's memory that one lookup's misses pass through, kept between calls and
// grown as batches grow; `pending` says a call's queued work may still read them.
template <CacheKey K>
struct CachedLookup<K>::Staging {
  Backend backend = Backend::kCpu;
  size_t capacity = 0;
  BackendBuffer<K> missing_keys;
  BackendBuffer<uint64_t> positions;
  BackendBuffer<uint64_t> count;
  BackendBuffer<float> rows;        // every missing key's row (fetched or absent_fill)
  BackendBuffer<K> found_keys;      // the distinct fetched keys, for the cache
  BackendBuffer<float> found_rows;  // and their rows
  std::vector<K> host_keys;
  std::vector<float> host_rows;
  std::vector<float> host_found_rows;
  std::vector<K> host_found_keys;
  std::vector<K> unique_keys;       // the distinct missing keys, in first-miss order
  std::vector<uint32_t> unique_of;  // each miss's index among them
  std::vector<float> unique_rows;
  std::unordered_map<K, uint32_t> index;
  std::unique_ptr<bool[]> host_founds;
  StreamHandle pending_stream = nullptr;
  bool pending = false;

  void reserve(size_t n, uint32_t dim) {
    if (n <= capacity) return;
    const size_t c = std::max(n, capacity * 2);
    missing_keys = BackendBuffer<K>(backend, c);
    positions = BackendBuffer<uint64_t>(backend, c);
    rows = BackendBuffer<float>(backend, c * dim);
    found_keys = BackendBuffer<K>(backend, c);
    found_rows = BackendBuffer<float>(backend, c * dim);
    host_founds = std::make_unique<bool[]>(c);
    capacity = c;
  }
  void wait() {
    if (!pending) return;
    detail::sync_stream(backend, pending_stream);
    pending = false;
  }
};

template <CacheKey K>
CachedLookup<K>::CachedLookup(EmbeddingCache<K>& cache, MissSource<K>& source,
                              LookupOptions options)
    : cache_(cache), source_(source), options_(options), staging_(std::make_unique<Staging>()) {
  require(source.dim() == cache.dim(), "CachedLookup", "source dim", std::to_string(source.dim()),
          "must equal the cache's dim = " + std::to_string(cache.dim()));
  require(options.replace_below_hit_rate >= 0.0 && options.replace_below_hit_rate <= 1.0,
          "CachedLookup", "replace_below_hit_rate", std::to_string(options.replace_below_hit_rate),
          "must lie in [0, 1]");
  staging_->backend = cache.backend();
  staging_->count = BackendBuffer<uint64_t>(cache.backend(), 1);
}

template <CacheKey K>
CachedLookup<K>::~CachedLookup() {
  try {
    staging_->wait();
  } catch (...) {
    // The queued work failed; its error was the caller's to see through the stream.
  }
}

template <CacheKey K>
LookupResult CachedLookup<K>::lookup(size_t n, const K* keys, float* values, StreamHandle stream) {
  Staging& s = *staging_;
  const Backend backend = s.backend;
  const uint32_t dim = cache_.dim();
  LookupResult result;
  if (n == 0) return result;
  s.wait();  // the previous call's queued insertion may still read the staging buffers
  s.reserve(n, dim);
  cache_.query(n, keys, values, s.missing_keys.data(), s.positions.data(), s.count.data(), stream);
  uint64_t missed = 0;
  detail::copy_async(backend, &missed, s.count.data(), sizeof(missed), stream);
  detail::sync_stream(backend, stream);
  result.hits = n - missed;
  if (missed == 0) return result;

  s.host_keys.resize(missed);
  s.host_rows.resize(missed * dim);
  detail::copy_async(backend, s.host_keys.data(), s.missing_keys.data(), missed * sizeof(K),
                     stream);
  detail::sync_stream(backend, stream);
  // A key repeated in the batch misses once per copy; the source is asked once per distinct key
  // and the cache gets each once.
  s.unique_keys.clear();
  s.unique_of.resize(missed);
  s.index.clear();
  for (size_t i = 0; i < missed; ++i) {
    const auto [it, fresh] =
        s.index.try_emplace(s.host_keys[i], static_cast<uint32_t>(s.unique_keys.size()));
    if (fresh) s.unique_keys.push_back(s.host_keys[i]);
    s.unique_of[i] = it->second;
  }
  const size_t unique = s.unique_keys.size();
  s.unique_rows.resize(unique * dim);
  bool* founds = s.host_founds.get();
  std::fill(founds, founds + unique, false);
  source_.fetch(unique, s.unique_keys.data(), s.unique_rows.data(), founds);
  result.source_keys = unique;

  s.host_found_keys.clear();
  s.host_found_rows.clear();
  for (size_t u = 0; u < unique; ++u) {
    float* row = s.unique_rows.data() + u * dim;
    if (founds[u]) {
      s.host_found_keys.push_back(s.unique_keys[u]);
      s.host_found_rows.insert(s.host_found_rows.end(), row, row + dim);
    } else {
      std::fill(row, row + dim, options_.absent_fill);
    }
  }
  for (size_t i = 0; i < missed; ++i) {
    const uint32_t u = s.unique_of[i];
    std::copy_n(s.unique_rows.data() + size_t{u} * dim, dim, s.host_rows.data() + i * dim);
    result.fetched += founds[u] ? 1 : 0;
  }
  result.absent = missed - result.fetched;

  // Pageable host -> device copies return once the host buffer has been read, so the host
  // vectors may change after this call while the queued work still runs.
  detail::copy_async(backend, s.rows.data(), s.host_rows.data(), missed * dim * sizeof(float),
                     stream);
  detail::scatter_rows(backend, missed, s.positions.data(), s.rows.data(), dim, values, stream);

  const double hit_rate = static_cast<double>(result.hits) / static_cast<double>(n);
  if (!s.host_found_keys.empty() && hit_rate < options_.replace_below_hit_rate) {
    const size_t found = s.host_found_keys.size();
    detail::copy_async(backend, s.found_keys.data(), s.host_found_keys.data(), found * sizeof(K),
                       stream);
    detail::copy_async(backend, s.found_rows.data(), s.host_found_rows.data(),
                       found * dim * sizeof(float), stream);
    // On the GPU in waves of at most an eighth of the sets' count, as preload does: keys of one
    // wave seldom share a set, so they do not wait on each other's set locks and are placed as
    // the batch order (the CPU's) places them (docs/cache.md).
    const size_t wave = backend == Backend::kCpu
                            ? found
                            : static_cast<size_t>(std::max<uint64_t>(1, cache_.num_sets() / 8));
    for (size_t first = 0; first < found; first += wave) {
      const size_t count = std::min(wave, found - first);
      cache_.replace(count, s.found_keys.data() + first,
                     s.found_rows.data() + first * static_cast<size_t>(dim), stream);
    }
    result.replaced = true;
  }
  s.pending = backend != Backend::kCpu;
  s.pending_stream = stream;
  return result;
}

template class CachedLookup<int32_t>;
template class CachedLookup<int64_t>;
template class CachedLookup<uint64_t>;

}  // namespace dynemb::cache

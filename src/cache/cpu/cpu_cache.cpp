#include "cpu/cpu_cache.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "backends.hpp"
#include "cache_checks.hpp"
#include "dynemb/cache/cache_sets.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::cache::detail {
namespace {

constexpr int64_t kNoSlot = -1;

}  // namespace

template <CacheKey K>
CpuCache<K>::CpuCache(const CacheOptions<K>& options, const CacheFootprint& footprint)
    : options_(options), footprint_(footprint), ways_(options.ways) {
  try {
    keys_ = std::make_unique_for_overwrite<K[]>(footprint.slots);
    stamps_ = std::make_unique<std::atomic<uint64_t>[]>(footprint.slots);
    values_ = std::make_unique_for_overwrite<float[]>(footprint.slots * options.dim);
    locks_ = std::make_unique<SetLock[]>(footprint.sets);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("make_cache: backend = cpu, allocating " + std::to_string(footprint.bytes) +
                      " bytes for " + std::to_string(footprint.slots) + " slots failed");
  }
  std::fill(keys_.get(), keys_.get() + footprint.slots, options.empty_key);
}

template <CacheKey K>
int64_t CpuCache<K>::find_in_set(uint64_t set, K key) const {
  const K* k = keys_.get() + set * ways_;
  for (uint32_t w = 0; w < ways_; ++w) {
    if (k[w] == key) return static_cast<int64_t>(set * ways_ + w);
  }
  return kNoSlot;
}

template <CacheKey K>
bool CpuCache<K>::usable(K key) {
  if (key != options_.empty_key) return true;
  counters_.sentinel_keys.fetch_add(1, std::memory_order_relaxed);
  return false;
}

template <CacheKey K>
void CpuCache<K>::query(size_t n, const K* keys, float* values, K* missing_keys,
                        uint64_t* missing_positions, uint64_t* miss_count, StreamHandle) {
  const char* where = "EmbeddingCache::query";
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  require_buffer(where, "missing_keys", missing_keys, n);
  require_buffer(where, "missing_positions", missing_positions, n);
  require_buffer(where, "miss_count", miss_count, 1);
  if (options_.validate_keys) check_no_sentinel_host(where, n, keys, options_.empty_key);
  const uint64_t stamp = clock_.fetch_add(1, std::memory_order_relaxed);
  const size_t dim = options_.dim;
  uint64_t misses = 0;
  for (size_t i = 0; i < n; ++i) {
    const K key = keys[i];
    bool found = false;
    if (usable(key)) {
      const CandidateSets sets = candidate_sets(cache_key_bits(key), footprint_.sets);
      for (const uint64_t set : {sets.first, sets.second}) {
        const std::shared_lock lock(locks_[set].mutex);
        const int64_t slot = find_in_set(set, key);
        if (slot == kNoSlot) continue;
        std::memcpy(values + i * dim, row(slot), dim * sizeof(float));
        std::atomic<uint64_t>& s = stamps_[slot];
        if (s.load(std::memory_order_relaxed) < stamp) s.store(stamp, std::memory_order_relaxed);
        found = true;
        break;
      }
    }
    if (!found) {
      missing_keys[misses] = key;
      missing_positions[misses] = i;
      ++misses;
    }
  }
  *miss_count = misses;
  counters_.hits.fetch_add(n - misses, std::memory_order_relaxed);
  counters_.misses.fetch_add(misses, std::memory_order_relaxed);
}

template <CacheKey K>
void CpuCache<K>::replace_locked(uint64_t set_a, uint64_t set_b, K key, const float* src,
                                 uint64_t stamp) {
  const size_t dim = options_.dim;
  int64_t slot = find_in_set(set_a, key);
  if (slot == kNoSlot) slot = find_in_set(set_b, key);
  if (slot != kNoSlot) {
    std::memcpy(row(slot), src, dim * sizeof(float));
    std::atomic<uint64_t>& s = stamps_[slot];
    s.store(std::max(s.load(std::memory_order_relaxed), stamp), std::memory_order_relaxed);
    counters_.refreshed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A free slot of the emptier set (the first set on a tie), else the least recently used slot
  // of both: the lowest (stamp, key bits).
  uint32_t free_a = 0;
  uint32_t free_b = 0;
  int64_t first_free_a = kNoSlot;
  int64_t first_free_b = kNoSlot;
  int64_t victim = kNoSlot;
  uint64_t victim_stamp = 0;
  uint64_t victim_bits = 0;
  for (const uint64_t set : {set_a, set_b}) {
    for (uint32_t w = 0; w < ways_; ++w) {
      const uint64_t s = set * ways_ + w;
      if (keys_[s] == options_.empty_key) {
        if (set == set_a) {
          if (free_a++ == 0) first_free_a = static_cast<int64_t>(s);
        } else if (free_b++ == 0) {
          first_free_b = static_cast<int64_t>(s);
        }
        continue;
      }
      const uint64_t st = stamps_[s].load(std::memory_order_relaxed);
      const uint64_t bits = cache_key_bits(keys_[s]);
      if (victim == kNoSlot || st < victim_stamp || (st == victim_stamp && bits < victim_bits)) {
        victim = static_cast<int64_t>(s);
        victim_stamp = st;
        victim_bits = bits;
      }
    }
  }
  if (free_a > 0 || free_b > 0) {
    slot = free_a >= free_b ? first_free_a : first_free_b;
  } else {
    slot = victim;
    counters_.evicted.fetch_add(1, std::memory_order_relaxed);
  }
  keys_[slot] = key;
  std::memcpy(row(slot), src, dim * sizeof(float));
  stamps_[slot].store(stamp, std::memory_order_relaxed);
  counters_.inserted.fetch_add(1, std::memory_order_relaxed);
}

template <CacheKey K>
void CpuCache<K>::replace(size_t n, const K* keys, const float* values, StreamHandle) {
  const char* where = "EmbeddingCache::replace";
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  if (options_.validate_keys) check_no_sentinel_host(where, n, keys, options_.empty_key);
  if (n == 0) return;
  const uint64_t base = clock_.fetch_add(n, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    const K key = keys[i];
    if (!usable(key)) continue;
    const CandidateSets sets = candidate_sets(cache_key_bits(key), footprint_.sets);
    const uint64_t lo = std::min(sets.first, sets.second);
    const uint64_t hi = std::max(sets.first, sets.second);
    const std::unique_lock lock_lo(locks_[lo].mutex);
    const std::unique_lock lock_hi(locks_[hi].mutex);
    replace_locked(sets.first, sets.second, key, values + i * options_.dim, base + i);
  }
}

template <CacheKey K>
void CpuCache<K>::update(size_t n, const K* keys, const float* values, StreamHandle) {
  const char* where = "EmbeddingCache::update";
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  if (options_.validate_keys) check_no_sentinel_host(where, n, keys, options_.empty_key);
  for (size_t i = 0; i < n; ++i) {
    const K key = keys[i];
    if (!usable(key)) continue;
    const CandidateSets sets = candidate_sets(cache_key_bits(key), footprint_.sets);
    for (const uint64_t set : {sets.first, sets.second}) {
      const std::unique_lock lock(locks_[set].mutex);
      const int64_t slot = find_in_set(set, key);
      if (slot == kNoSlot) continue;
      std::memcpy(row(slot), values + i * options_.dim, options_.dim * sizeof(float));
      counters_.refreshed.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
}

template <CacheKey K>
void CpuCache<K>::erase(size_t n, const K* keys, StreamHandle) {
  const char* where = "EmbeddingCache::erase";
  require_buffer(where, "keys", keys, n);
  if (options_.validate_keys) check_no_sentinel_host(where, n, keys, options_.empty_key);
  for (size_t i = 0; i < n; ++i) {
    const K key = keys[i];
    if (!usable(key)) continue;
    const CandidateSets sets = candidate_sets(cache_key_bits(key), footprint_.sets);
    for (const uint64_t set : {sets.first, sets.second}) {
      const std::unique_lock lock(locks_[set].mutex);
      const int64_t slot = find_in_set(set, key);
      if (slot == kNoSlot) continue;
      keys_[slot] = options_.empty_key;
      stamps_[slot].store(0, std::memory_order_relaxed);
      counters_.erased.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
}

template <CacheKey K>
size_t CpuCache<K>::dump(uint64_t first_set, uint64_t num_sets, K* keys, float* values,
                         StreamHandle) {
  const char* where = "EmbeddingCache::dump";
  check_set_range(where, first_set, num_sets, footprint_.sets);
  require_buffer(where, "keys", keys, num_sets);
  const size_t dim = options_.dim;
  size_t count = 0;
  for (uint64_t set = first_set; set < first_set + num_sets; ++set) {
    const std::shared_lock lock(locks_[set].mutex);
    for (uint32_t w = 0; w < ways_; ++w) {
      const uint64_t s = set * ways_ + w;
      if (keys_[s] == options_.empty_key) continue;
      keys[count] = keys_[s];
      if (values != nullptr) std::memcpy(values + count * dim, row(s), dim * sizeof(float));
      ++count;
    }
  }
  return count;
}

template <CacheKey K>
size_t CpuCache<K>::preload(size_t n, const K* keys, const float* values, StreamHandle stream) {
  const char* where = "EmbeddingCache::preload";
  check_preload_fits(where, n, footprint_);
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  if (options_.validate_keys) check_no_sentinel_host(where, n, keys, options_.empty_key);
  clear(stream);
  const uint64_t before = counters_.evicted.load();
  replace(n, keys, values, stream);
  return counters_.evicted.load() - before;
}

template <CacheKey K>
void CpuCache<K>::clear(StreamHandle) {
  for (uint64_t set = 0; set < footprint_.sets; ++set) {
    const std::unique_lock lock(locks_[set].mutex);
    for (uint32_t w = 0; w < ways_; ++w) {
      keys_[set * ways_ + w] = options_.empty_key;
      stamps_[set * ways_ + w].store(0, std::memory_order_relaxed);
    }
  }
}

template <CacheKey K>
size_t CpuCache<K>::size(StreamHandle) const {
  size_t count = 0;
  for (uint64_t set = 0; set < footprint_.sets; ++set) {
    const std::shared_lock lock(locks_[set].mutex);
    for (uint32_t w = 0; w < ways_; ++w) count += keys_[set * ways_ + w] != options_.empty_key;
  }
  return count;
}

template <CacheKey K>
CacheStats CpuCache<K>::stats() const {
  CacheStats s;
  s.hits = counters_.hits.load();
  s.misses = counters_.misses.load();
  s.inserted = counters_.inserted.load();
  s.evicted = counters_.evicted.load();
  s.refreshed = counters_.refreshed.load();
  s.erased = counters_.erased.load();
  s.sentinel_keys = counters_.sentinel_keys.load();
  return s;
}

template <CacheKey K>
std::unique_ptr<EmbeddingCache<K>> make_cpu_cache(const CacheOptions<K>& options,
                                                  const CacheFootprint& footprint) {
  return std::make_unique<CpuCache<K>>(options, footprint);
}

template class CpuCache<int32_t>;
template class CpuCache<int64_t>;
template class CpuCache<uint64_t>;
template std::unique_ptr<EmbeddingCache<int32_t>> make_cpu_cache(const CacheOptions<int32_t>&,
                                                                 const CacheFootprint&);
template std::unique_ptr<EmbeddingCache<int64_t>> make_cpu_cache(const CacheOptions<int64_t>&,
                                                                 const CacheFootprint&);
template std::unique_ptr<EmbeddingCache<uint64_t>> make_cpu_cache(const CacheOptions<uint64_t>&,
                                                                  const CacheFootprint&);

}  // namespace dynemb::cache::detail

// The CPU embedding cache: sets of `ways` slots in host memory, a reader-writer lock per set
// (padded to a cache line), access stamps as relaxed atomics so readers can refresh them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>

#include "dynemb/cache/embedding_cache.hpp"

namespace dynemb::cache::detail {

template <CacheKey K>
class CpuCache final : public EmbeddingCache<K> {
 public:
  CpuCache(const CacheOptions<K>& options, const CacheFootprint& footprint);

  void query(size_t n, const K* keys, float* values, K* missing_keys, uint64_t* missing_positions,
             uint64_t* miss_count, StreamHandle stream) override;
  void replace(size_t n, const K* keys, const float* values, StreamHandle stream) override;
  void update(size_t n, const K* keys, const float* values, StreamHandle stream) override;
  void erase(size_t n, const K* keys, StreamHandle stream) override;
  size_t dump(uint64_t first_set, uint64_t num_sets, K* keys, float* values,
              StreamHandle stream) override;
  size_t preload(size_t n, const K* keys, const float* values, StreamHandle stream) override;
  void clear(StreamHandle stream) override;
  size_t size(StreamHandle stream) const override;
  CacheStats stats() const override;
  const CacheOptions<K>& options() const override { return options_; }
  const CacheFootprint& footprint() const override { return footprint_; }
  Backend backend() const override { return Backend::kCpu; }

 private:
  struct alignas(64) SetLock {
    std::shared_mutex mutex;
  };
  struct Counters {
    std::atomic<uint64_t> hits{0}, misses{0}, inserted{0}, evicted{0}, refreshed{0}, erased{0},
        sentinel_keys{0};
  };

  // The slot of `key` in `set`, or -1.
  int64_t find_in_set(uint64_t set, K key) const;
  // Stores one key under both candidate sets' locks (held by the caller).
  void replace_locked(uint64_t set_a, uint64_t set_b, K key, const float* row, uint64_t stamp);
  // False (and counted) for the sentinel when keys are not validated.
  bool usable(K key);
  float* row(uint64_t slot) { return values_.get() + slot * options_.dim; }
  const float* row(uint64_t slot) const { return values_.get() + slot * options_.dim; }

  CacheOptions<K> options_;
  CacheFootprint footprint_;
  uint32_t ways_;
  std::unique_ptr<K[]> keys_;
  std::unique_ptr<std::atomic<uint64_t>[]> stamps_;
  std::unique_ptr<float[]> values_;
  std::unique_ptr<SetLock[]> locks_;
  std::atomic<uint64_t> clock_{1};  // access stamps are drawn from here; 0 marks a free slot
  Counters counters_;
};

}  // namespace dynemb::cache::detail

// The CUDA embedding cache: keys, access stamps and rows in device memory, a 4-byte version per
// set that writers lock and readers only check (device_view.cuh), counters in device memory, and
// the access clock on the host (each call draws its stamps from it).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "cuda/query_scratch.hpp"
#include "cuda/view.hpp"
#include "dynemb/cache/embedding_cache.hpp"

namespace dynemb::cache::detail {

template <CacheKey K>
class CudaCache final : public EmbeddingCache<K> {
 public:
  CudaCache(const CacheOptions<K>& options, const CacheFootprint& footprint);
  ~CudaCache() override;
  CudaCache(const CudaCache&) = delete;
  CudaCache& operator=(const CudaCache&) = delete;

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
  Backend backend() const override { return Backend::kCuda; }

 private:
  // Throws InvalidArgument for the first key equal to empty_key (validate_keys on; synchronizes).
  void check_keys(const char* where, size_t n, const K* keys, StreamHandle stream) const;
  void free_buffers() noexcept;

  CacheOptions<K> options_;
  CacheFootprint footprint_;
  CacheView<K> view_;
  uint32_t grid_limit_ = 0;         // blocks per launch: enough to fill every SM
  std::atomic<uint64_t> clock_{1};  // access stamps are drawn from here; 0 marks a free slot
  uint64_t tag_salt_ = 0;           // random: fused queries' tags differ from other caches' ones
  std::unique_ptr<QueryScratch> scratch_;  // the fused query's tile counts, per stream
};

}  // namespace dynemb::cache::detail

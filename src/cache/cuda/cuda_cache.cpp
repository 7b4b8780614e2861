#include "cuda/cuda_cache.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <string>

#include "backends.hpp"
#include "cache_checks.hpp"
#include "cuda/kernels.hpp"
#include "cuda/query_scratch.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#include "dynemb/core/cuda/device_info.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::cache::detail {
namespace {

cudaStream_t as_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

// A preload wave holds at most num_sets / kPreloadWaveFraction keys (2 sets each): a quarter of
// the sets are touched per wave, so keys of one wave seldom contend for a set.
constexpr uint64_t kPreloadWaveFraction = 8;

// cudaMalloc that reports a failure as OutOfMemory naming the buffer and the cache's footprint.
template <class T>
T* allocate(uint64_t count, const char* buffer, const CacheFootprint& footprint) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, std::max<uint64_t>(count, 1) * sizeof(T));
  if (status != cudaSuccess) {
    cudaGetLastError();  // the failed allocation's error is not left for the next call to see
    throw OutOfMemory(std::string("make_cache: backend = cuda, allocating the ") + buffer + " (" +
                      std::to_string(count * sizeof(T)) + " bytes of the cache's " +
                      std::to_string(footprint.bytes) + ") failed: " + cudaGetErrorString(status));
  }
  return static_cast<T*>(p);
}

}  // namespace

template <CacheKey K>
CudaCache<K>::CudaCache(const CacheOptions<K>& options, const CacheFootprint& footprint)
    : options_(options), footprint_(footprint) {
  std::random_device entropy;
  tag_salt_ = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  const dynemb::core::cuda::DeviceGuard on_device(options.device);
  view_.num_sets = footprint.sets;
  view_.ways = options.ways;
  view_.dim = options.dim;
  view_.empty_key = options.empty_key;
  try {
    view_.keys = allocate<K>(footprint.slots, "keys", footprint);
    view_.stamps = allocate<unsigned long long>(footprint.slots, "access stamps", footprint);
    view_.values = allocate<float>(footprint.slots * options.dim, "rows", footprint);
    view_.versions = allocate<uint32_t>(footprint.sets, "set versions", footprint);
    view_.counters = allocate<DeviceCounters>(1, "counters", footprint);
    dynemb::core::cuda::check(cudaMemset(view_.versions, 0, footprint.sets * sizeof(uint32_t)),
                              "make_cache: cudaMemset");
    dynemb::core::cuda::check(cudaMemset(view_.counters, 0, sizeof(DeviceCounters)),
                              "make_cache: cudaMemset");
    dynemb::core::cuda::check(
        cudaMemset(view_.stamps, 0, footprint.slots * sizeof(unsigned long long)),
        "make_cache: cudaMemset");
    grid_limit_ = dynemb::core::cuda::multiprocessors(options.device) * kMaxBlocksPerSm;
    scratch_ =
        std::make_unique<QueryScratch>(static_cast<uint32_t>(fused_query_max_blocks(grid_limit_)));
    launch_clear(view_, nullptr);
    dynemb::core::cuda::check(cudaDeviceSynchronize(), "make_cache: clearing the cache");
  } catch (...) {
    free_buffers();
    throw;
  }
}

template <CacheKey K>
CudaCache<K>::~CudaCache() {
  free_buffers();
}

template <CacheKey K>
void CudaCache<K>::free_buffers() noexcept {
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  cudaDeviceSynchronize();
  scratch_.reset();
  cudaFree(view_.keys);
  cudaFree(view_.stamps);
  cudaFree(view_.values);
  cudaFree(view_.versions);
  cudaFree(view_.counters);
  view_ = CacheView<K>{};
}

template <CacheKey K>
void CudaCache<K>::check_keys(const char* where, size_t n, const K* keys,
                              StreamHandle stream) const {
  if (!options_.validate_keys) return;
  const uint64_t first = find_sentinel(n, keys, options_.empty_key, as_stream(stream));
  if (first != UINT64_MAX) throw_sentinel_key(where, first, options_.empty_key);
}

template <CacheKey K>
void CudaCache<K>::query(size_t n, const K* keys, float* values, K* missing_keys,
                         uint64_t* missing_positions, uint64_t* miss_count, StreamHandle stream) {
  const char* where = "EmbeddingCache::query";
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  require_buffer(where, "missing_keys", missing_keys, n);
  require_buffer(where, "missing_positions", missing_positions, n);
  require_buffer(where, "miss_count", miss_count, 1);
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  check_keys(where, n, keys, stream);
  const cudaStream_t s = as_stream(stream);
  if (n == 0) {
    dynemb::core::cuda::check(cudaMemsetAsync(miss_count, 0, sizeof(uint64_t), s),
                              "EmbeddingCache::query: cudaMemsetAsync");
    return;
  }
  QueryCall<K> call;
  call.n = n;
  call.keys = keys;
  call.values = values;
  call.stamp = clock_.fetch_add(1, std::memory_order_relaxed);
  call.device = options_.device;
  // A captured call may be replayed with the same tag, so the fused kernel's tagged counts would
  // be read stale: a graph gets the two-step query.
  if (n <= kFusedMaxKeys && !stream_is_capturing(s)) {
    // One launch: the kernel compacts its misses itself through per-block counts in `status`,
    // which it recognizes by this call's tag: the stamp (unique, below 2^53) with the cache's
    // random salt, never 0 (the tag of a stream's fresh buffer).
    while ((call.tag = (call.stamp ^ tag_salt_) & kTileTagMask) == 0) {
      call.stamp = clock_.fetch_add(1, std::memory_order_relaxed);
    }
    call.grid_limit = grid_limit_;
    const uint64_t most_blocks = fused_query_blocks(n, fused_query_tile(n, grid_limit_));
    call.missing_keys = missing_keys;
    call.missing_positions = missing_positions;
    call.miss_count = miss_count;
    const QueryScratch::ForStream kept = scratch_->for_stream(s);
    call.status = kept.status;
    if (options_.query_graphs) call.graphs = kept.graphs;
    if (call.status != nullptr && most_blocks <= scratch_->entries()) {
      // The stream's arrival word follows its tile counts.
      if (!options_.misses_in_batch_order) call.arrivals = call.status + scratch_->entries();
      launch_query(view_, call, s);
      return;
    }
    const dynemb::core::cuda::DeviceArray<TileStatus> status(most_blocks, s);
    call.status = status.data();
    call.graphs = nullptr;
    launch_query(view_, call, s);
    return;
  }
  const dynemb::core::cuda::DeviceArray<uint8_t> missed(n, s);
  call.missed = missed.data();
  call.grid_limit = grid_limit_;
  launch_query(view_, call, s);
  launch_compact_misses(view_, n, keys, missed.data(), missing_keys, missing_positions, miss_count,
                        s);
}

template <CacheKey K>
void CudaCache<K>::replace(size_t n, const K* keys, const float* values, StreamHandle stream) {
  const char* where = "EmbeddingCache::replace";
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  check_keys(where, n, keys, stream);
  if (n == 0) return;
  const uint64_t base = clock_.fetch_add(n, std::memory_order_relaxed);
  launch_write(view_, WriteKind::kReplace, n, keys, values, base, grid_limit_, as_stream(stream));
}

template <CacheKey K>
void CudaCache<K>::update(size_t n, const K* keys, const float* values, StreamHandle stream) {
  const char* where = "EmbeddingCache::update";
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  check_keys(where, n, keys, stream);
  launch_write(view_, WriteKind::kUpdate, n, keys, values, 0, grid_limit_, as_stream(stream));
}

template <CacheKey K>
void CudaCache<K>::erase(size_t n, const K* keys, StreamHandle stream) {
  const char* where = "EmbeddingCache::erase";
  require_buffer(where, "keys", keys, n);
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  check_keys(where, n, keys, stream);
  launch_write(view_, WriteKind::kErase, n, keys, nullptr, 0, grid_limit_, as_stream(stream));
}

template <CacheKey K>
size_t CudaCache<K>::dump(uint64_t first_set, uint64_t num_sets, K* keys, float* values,
                          StreamHandle stream) {
  const char* where = "EmbeddingCache::dump";
  check_set_range(where, first_set, num_sets, footprint_.sets);
  require_buffer(where, "keys", keys, num_sets);
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  return dump_sets(view_, first_set, num_sets, keys, values, as_stream(stream));
}

template <CacheKey K>
size_t CudaCache<K>::preload(size_t n, const K* keys, const float* values, StreamHandle stream) {
  const char* where = "EmbeddingCache::preload";
  check_preload_fits(where, n, footprint_);
  require_buffer(where, "keys", keys, n);
  require_buffer(where, "values", values, n);
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  check_keys(where, n, keys, stream);
  clear(stream);
  const uint64_t before = stats().evicted;
  // One write kernel over the whole table would serialize its keys in the order the set locks
  // are won, and the keys that wait longest are those whose candidate sets are most contended,
  // i.e. the sets that fill first: they would be placed last, into full pairs, and evict keys the
  // batch (CPU) order places. Launching the keys in batch order in waves of at most
  // kPreloadWaveFraction of the sets' count makes two keys of a wave rarely share a set, so the
  // placement follows the batch order, as on the CPU (docs/cache.md).
  const cudaStream_t s = as_stream(stream);
  if (n != 0) {
    const uint64_t base = clock_.fetch_add(n, std::memory_order_relaxed);
    const size_t wave = std::max<size_t>(1, footprint_.sets / kPreloadWaveFraction);
    for (size_t first = 0; first < n; first += wave) {
      const size_t count = std::min(wave, n - first);
      launch_write(view_, WriteKind::kReplace, count, keys + first,
                   values + first * static_cast<size_t>(options_.dim), base + first, grid_limit_,
                   s);
    }
  }
  dynemb::core::cuda::sync(s, "EmbeddingCache::preload");
  return stats().evicted - before;
}

template <CacheKey K>
void CudaCache<K>::clear(StreamHandle stream) {
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  launch_clear(view_, as_stream(stream));
}

template <CacheKey K>
size_t CudaCache<K>::size(StreamHandle stream) const {
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  return count_stored(view_, as_stream(stream));
}

template <CacheKey K>
CacheStats CudaCache<K>::stats() const {
  const dynemb::core::cuda::DeviceGuard on_device(options_.device);
  dynemb::core::cuda::check(cudaDeviceSynchronize(),
                            "EmbeddingCache::stats: cudaDeviceSynchronize");
  DeviceCounters c{};
  dynemb::core::cuda::check(cudaMemcpy(&c, view_.counters, sizeof(c), cudaMemcpyDeviceToHost),
                            "EmbeddingCache::stats: cudaMemcpy");
  CacheStats s;
  s.hits = c.hits;
  s.misses = c.misses;
  s.inserted = c.inserted;
  s.evicted = c.evicted;
  s.refreshed = c.refreshed;
  s.erased = c.erased;
  s.sentinel_keys = c.sentinel_keys;
  return s;
}

template <CacheKey K>
std::unique_ptr<EmbeddingCache<K>> make_cuda_cache(const CacheOptions<K>& options,
                                                   const CacheFootprint& footprint) {
  return std::make_unique<CudaCache<K>>(options, footprint);
}

void scatter_rows_cuda(size_t n, const uint64_t* positions, const float* rows, uint32_t dim,
                       float* out, void* stream) {
  launch_scatter_rows(n, positions, rows, dim, out, static_cast<cudaStream_t>(stream));
}

void copy_async_cuda(void* dst, const void* src, size_t bytes, void* stream) {
  dynemb::core::cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)),
                            "CachedLookup: cudaMemcpyAsync");
}

void sync_stream_cuda(void* stream) {
  dynemb::core::cuda::sync(as_stream(stream), "CachedLookup");
}

template class CudaCache<int32_t>;
template class CudaCache<int64_t>;
template class CudaCache<uint64_t>;
template std::unique_ptr<EmbeddingCache<int32_t>> make_cuda_cache(const CacheOptions<int32_t>&,
                                                                  const CacheFootprint&);
template std::unique_ptr<EmbeddingCache<int64_t>> make_cuda_cache(const CacheOptions<int64_t>&,
                                                                  const CacheFootprint&);
template std::unique_ptr<EmbeddingCache<uint64_t>> make_cuda_cache(const CacheOptions<uint64_t>&,
                                                                   const CacheFootprint&);

}  // namespace dynemb::cache::detail

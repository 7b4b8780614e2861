#include <string>

#include "backends.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::cache {

template <CacheKey K>
std::unique_ptr<EmbeddingCache<K>> make_cache(Backend backend, const CacheOptions<K>& options) {
  const CacheFootprint footprint = cache_footprint(backend, options);
#if !defined(DYNEMB_WITH_CUDA)
  if (backend == Backend::kCuda) {
    throw NotAvailable(
        "make_cache: backend = cuda, not built into this binary (build with nvcc "
        "found, DYNEMB_CUDA=AUTO/ON)");
  }
#endif
  const uint64_t available = cache_memory_available(backend, options.device);
  if (footprint.bytes > available) {
    throw OutOfMemory("make_cache: capacity (" + std::to_string(footprint.slots) + " slots of " +
                      std::to_string(footprint.bytes_per_slot) + " bytes) needs " +
                      std::to_string(footprint.bytes) + " bytes, above the " +
                      std::to_string(available) + " bytes of " + to_string(backend) +
                      " memory available");
  }
  if (backend == Backend::kCpu) return detail::make_cpu_cache<K>(options, footprint);
#if defined(DYNEMB_WITH_CUDA)
  return detail::make_cuda_cache<K>(options, footprint);
#else
  throw NotAvailable("make_cache: backend = " + to_string(backend) + " not built into this binary");
#endif
}

template std::unique_ptr<EmbeddingCache<int32_t>> make_cache(Backend, const CacheOptions<int32_t>&);
template std::unique_ptr<EmbeddingCache<int64_t>> make_cache(Backend, const CacheOptions<int64_t>&);
template std::unique_ptr<EmbeddingCache<uint64_t>> make_cache(Backend,
                                                              const CacheOptions<uint64_t>&);

}  // namespace dynemb::cache

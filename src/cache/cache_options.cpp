#include "dynemb/cache/cache_options.hpp"

#include <unistd.h>

#include <cmath>
#include <limits>
#include <string>

#include "dynemb/core/error.hpp"

#if defined(DYNEMB_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#endif

namespace dynemb::cache {
namespace {

constexpr uint64_t kMaxSlots = uint64_t{1} << 40;  // far above any machine's memory in rows

// Bytes of one set's lock word on `backend`.
uint64_t set_lock_bytes(Backend backend) {
  return backend == Backend::kCpu ? 64 : 4;
}

}  // namespace

double cache_fill_limit(uint32_t ways) {
  return ways >= 64 ? 0.95 : 0.9;
}

template <CacheKey K>
CacheFootprint cache_footprint(Backend backend, const CacheOptions<K>& options) {
  const char* where = "cache_footprint";
  require(options.dim > 0, where, "dim", std::to_string(options.dim), "must be > 0");
  require(options.dim <= (1u << 20), where, "dim", std::to_string(options.dim),
          "must be <= 1048576");
  require(options.ways == 32 || options.ways == 64 || options.ways == 128, where, "ways",
          std::to_string(options.ways), "must be 32, 64 or 128");
  require(!(options.capacity_rows > 0 && options.capacity_bytes > 0), where, "capacity_bytes",
          std::to_string(options.capacity_bytes),
          "must be 0 when capacity_rows is given (capacity_rows = " +
              std::to_string(options.capacity_rows) + ")");
  require(options.capacity_rows > 0 || options.capacity_bytes > 0, where, "capacity_rows", "0",
          "one of capacity_rows and capacity_bytes must be > 0");

  CacheFootprint f;
  f.bytes_per_slot = sizeof(K) + sizeof(uint64_t) + uint64_t{4} * options.dim;
  const uint64_t bytes_per_set = f.bytes_per_slot * options.ways + set_lock_bytes(backend);
  const double fill = cache_fill_limit(options.ways);
  if (options.capacity_rows > 0) {
    require(options.capacity_rows <= kMaxSlots, where, "capacity_rows",
            std::to_string(options.capacity_rows), "must be <= " + std::to_string(kMaxSlots));
    const auto slots =
        static_cast<uint64_t>(std::ceil(static_cast<double>(options.capacity_rows) / fill));
    f.sets = std::max<uint64_t>(2, (slots + options.ways - 1) / options.ways);
  } else {
    f.sets = options.capacity_bytes / bytes_per_set;
    require(f.sets >= 2, where, "capacity_bytes", std::to_string(options.capacity_bytes),
            "must hold at least two sets (" + std::to_string(2 * bytes_per_set) + " bytes at dim " +
                std::to_string(options.dim) + ", " + std::to_string(options.ways) + " ways)");
    require(f.sets * options.ways <= kMaxSlots, where, "capacity_bytes",
            std::to_string(options.capacity_bytes),
            "must give <= " + std::to_string(kMaxSlots) + " slots");
  }
  f.slots = f.sets * options.ways;
  f.rows = static_cast<uint64_t>(std::floor(static_cast<double>(f.slots) * fill));
  f.bytes = f.sets * bytes_per_set;
  return f;
}

uint64_t cache_memory_available(Backend backend, int device) {
  if (backend == Backend::kCpu) {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return std::numeric_limits<uint64_t>::max();
    return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
#if defined(DYNEMB_WITH_CUDA)
  const core::cuda::DeviceGuard on_device(device);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  core::cuda::check(cudaMemGetInfo(&free_bytes, &total_bytes),
                    "cache_memory_available: cudaMemGetInfo");
  return free_bytes;
#else
  (void)device;
  throw NotAvailable("cache_memory_available: backend = cuda, but this build has no CUDA backend");
#endif
}

template CacheFootprint cache_footprint<int32_t>(Backend, const CacheOptions<int32_t>&);
template CacheFootprint cache_footprint<int64_t>(Backend, const CacheOptions<int64_t>&);
template CacheFootprint cache_footprint<uint64_t>(Backend, const CacheOptions<uint64_t>&);

}  // namespace dynemb::cache

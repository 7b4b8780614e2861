#include "dynemb/core/cuda/scratch_pool.hpp"

#include <mutex>
#include <vector>

#include "dynemb/core/cuda/check.hpp"

namespace dynemb::core::cuda {

cudaMemPool_t scratch_pool() {
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;  // by device ordinal; null until created
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice (scratch pool)");
  std::lock_guard<std::mutex> lock(mutex);
  if (pools.size() <= static_cast<size_t>(device)) pools.resize(device + 1, nullptr);
  if (pools[device] == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate (scratch pool)");
    uint64_t keep = kScratchPoolKeepBytes;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute (scratch pool release threshold)");
    pools[device] = pool;
  }
  return pools[device];
}

}  // namespace dynemb::core::cuda

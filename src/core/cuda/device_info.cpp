#include "core/cuda/device_info.hpp"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "core/cuda/check.hpp"

namespace dynemb::cuda {
namespace {

// Cached counts of the first kCachedDevices devices (0: not queried yet); others are queried on
// every call.
constexpr int kCachedDevices = 64;

int query_multiprocessors(int device) {
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
  return sms;
}

}  // namespace

uint32_t current_multiprocessors() {
  static std::array<std::atomic<int>, kCachedDevices> cache{};
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (device < 0 || device >= kCachedDevices) return query_multiprocessors(device);
  int sms = cache[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    sms = query_multiprocessors(device);
    cache[device].store(sms, std::memory_order_relaxed);
  }
  return static_cast<uint32_t>(sms);
}

}  // namespace dynemb::cuda

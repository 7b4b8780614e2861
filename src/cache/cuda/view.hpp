// The CUDA cache's device buffers as plain pointers, shared by the host class and the kernels.
#pragma once

#include <cstdint>

namespace dynemb::cache::detail {

// Counters kept in device memory (CacheStats' fields).
struct DeviceCounters {
  unsigned long long hits, misses, inserted, evicted, refreshed, erased, sentinel_keys;
};

// The cache's buffers: slot w of set t is t * ways + w; rows are `dim` floats per slot.
template <class K>
struct CacheView {
  K* keys = nullptr;
  unsigned long long* stamps = nullptr;  // access stamps; 0 for a free slot
  float* values = nullptr;
  uint32_t* versions = nullptr;  // one per set: even unlocked, odd locked
  DeviceCounters* counters = nullptr;
  uint64_t num_sets = 0;
  uint32_t ways = 0;
  uint32_t dim = 0;
  K empty_key{};
};

}  // namespace dynemb::cache::detail

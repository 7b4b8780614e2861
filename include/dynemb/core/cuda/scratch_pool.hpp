// dynemb's own stream-ordered memory pool per device, for call temporaries (DeviceArray).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dynemb::core::cuda {

// Bytes of freed temporaries a pool keeps mapped for reuse after a synchronization (the CUDA
// default pool keeps none, so every call after a sync would map its scratch afresh).
inline constexpr uint64_t kScratchPoolKeepBytes = uint64_t{1} << 30;

// The pool of the current device, created on first use (thread-safe); it lives for the process.
cudaMemPool_t scratch_pool();

}  // namespace dynemb::core::cuda

// Facts about the current CUDA device that kernels' launch shapes depend on.
#pragma once

#include <cstdint>

namespace dynemb::cuda {

// The streaming multiprocessors of the calling thread's current device (queried once per
// device, then cached).
uint32_t current_multiprocessors();

}  // namespace dynemb::cuda

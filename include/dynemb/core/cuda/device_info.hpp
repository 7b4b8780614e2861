// Facts about a CUDA device that kernels' launch shapes depend on.
#pragma once

#include <cstdint>

namespace dynemb::core::cuda {

// The streaming multiprocessors of `device` (one API call: query it once, keep the answer).
uint32_t multiprocessors(int device);

}  // namespace dynemb::core::cuda

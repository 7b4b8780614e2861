// Each backend's OpsBackend, made once (ops_backend.cpp chooses among them).
#pragma once

#include "dynemb/ops/ops_backend.hpp"

namespace dynemb::ops::detail {

// The CPU's ops (cpu/cpu_ops.cpp).
const OpsBackend& cpu_ops();
// The GPU's ops (cuda/cuda_ops.cpp); only in a build with the CUDA backend.
const OpsBackend& cuda_ops();

}  // namespace dynemb::ops::detail

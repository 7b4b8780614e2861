// Pooling with each bag's row loads staged through shared memory (staged_pool.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "dynemb/ops/pooling.hpp"

namespace dynemb::ops::cuda {

// Whether staged_pool takes feature x into o: SUM / MEAN over rows by address, dim a multiple
// of 4 up to 128, o's rows float4-aligned.
bool staged_pool_fits(const LookupFeature& x, const LookupOutput& o);

// pooled_lookup of feature x (staged_pool_fits) into o on `stream`, bit-identical to pool_kernel.
void staged_pool(const LookupFeature& x, const LookupOutput& o, cudaStream_t stream);

}  // namespace dynemb::ops::cuda

// Loads and stores that tell L2 how long to keep their lines. The fused backward streams each
// row's embedding and optimizer state through once (read, update, write) while it reads the bags'
// gradients many times over: marking the rows' lines evict-first leaves L2 to the gradients
// (docs/ops.md, "The fused backward's bytes").
#pragma once

#include <cstdint>

namespace dynemb::ops::cuda {

// *p, its line marked evict-first (kStream) or cached normally.
template <bool kStream, class T>
__device__ __forceinline__ T load_row(const T* p) {
  if constexpr (kStream) {
    return __ldcs(p);
  } else {
    return *p;
  }
}

// *p = v, the line marked evict-first (kStream) or cached normally.
template <bool kStream, class T>
__device__ __forceinline__ void store_row(T* p, const T& v) {
  if constexpr (kStream) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

}  // namespace dynemb::ops::cuda

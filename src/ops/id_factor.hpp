// What one id contributes to its bag: its weight, divided by the bag length for MEAN. Shared by
// the backends so their sums stay bit-identical.
#pragma once

#include <cstdint>

#include "dynemb/core/det_math.hpp"
#include "dynemb/ops/pooling.hpp"

namespace dynemb::ops::detail {

// The factor id i's row (forward) or its bag's gradient (backward) is multiplied by, in a bag
// of `len` ids.
DYNEMB_HD float id_factor(const LookupFeature& x, int64_t i, int64_t len) {
  const float w = x.weights != nullptr ? x.weights[i] : 1.0f;
  return x.mode == PoolingMode::kMean ? det::div(w, static_cast<float>(len)) : w;
}

}  // namespace dynemb::ops::detail

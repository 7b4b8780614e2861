// The fused optimizer for one row, spread over the 32 lanes of a warp (lane l updates elements
// l, l + 32, ...), so a warp reads and writes the row's embedding and state coalesced. The
// same rules as apply_optimizer (include/dynemb/ops/optimizer.hpp), row-level sums by shuffle.
#pragma once

#include <cstdint>

#include "dynemb/ops/optimizer.hpp"

namespace dynemb::ops_cuda {

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// Applies `o` to row = [w (dim) | state] with gradient g; every lane of the warp calls it.
__device__ __forceinline__ void apply_optimizer_warp(const OptimizerOptions& o, float* row,
                                                     const float* g, uint32_t dim, uint32_t lane) {
  using optimizer_detail::effective_grad;
  float scale = 1.0f;
  if (o.clip_norm > 0.0f) {
    float sq = 0.0f;
    for (uint32_t j = lane; j < dim; j += 32) sq += g[j] * g[j];
    const float norm = sqrtf(warp_sum(sq));
    if (norm > o.clip_norm) scale = o.clip_norm / norm;
  }
  float* w = row;
  float* state = row + dim;
  const float lr = o.learning_rate;
  switch (o.kind) {
    case OptimizerKind::kSgd:
      for (uint32_t j = lane; j < dim; j += 32) w[j] -= lr * effective_grad(o, g[j], w[j], scale);
      break;
    case OptimizerKind::kAdam: {
      float* m = state;
      float* v = state + dim;
      uint32_t* step = reinterpret_cast<uint32_t*>(state + 2 * dim);
      const uint32_t t = *step + 1;
      __syncwarp();
      if (lane == 0) *step = t;
      const float bc1 = 1.0f - powf(o.beta1, static_cast<float>(t));
      const float bc2 = 1.0f - powf(o.beta2, static_cast<float>(t));
      for (uint32_t j = lane; j < dim; j += 32) {
        const float gj = effective_grad(o, g[j], w[j], scale);
        m[j] = o.beta1 * m[j] + (1.0f - o.beta1) * gj;
        v[j] = o.beta2 * v[j] + (1.0f - o.beta2) * gj * gj;
        w[j] -= lr * (m[j] / bc1) / (sqrtf(v[j] / bc2) + o.eps);
      }
      break;
    }
    case OptimizerKind::kAdaGrad:
      for (uint32_t j = lane; j < dim; j += 32) {
        const float gj = effective_grad(o, g[j], w[j], scale);
        state[j] += gj * gj;
        w[j] -= lr * gj / (sqrtf(state[j] + o.initial_accumulator) + o.eps);
      }
      break;
    case OptimizerKind::kRowWiseAdaGrad: {
      float sq = 0.0f;
      for (uint32_t j = lane; j < dim; j += 32) {
        const float gj = effective_grad(o, g[j], w[j], scale);
        sq += gj * gj;
      }
      const float acc = state[0] + warp_sum(sq) / static_cast<float>(dim);
      const float step = lr / (sqrtf(acc + o.initial_accumulator) + o.eps);
      for (uint32_t j = lane; j < dim; j += 32) w[j] -= step * effective_grad(o, g[j], w[j], scale);
      __syncwarp();
      if (lane == 0) state[0] = acc;
      break;
    }
    case OptimizerKind::kRmsProp:
      for (uint32_t j = lane; j < dim; j += 32) {
        const float gj = effective_grad(o, g[j], w[j], scale);
        state[j] = o.rho * state[j] + (1.0f - o.rho) * gj * gj;
        w[j] -= lr * gj / (sqrtf(state[j]) + o.eps);
      }
      break;
    case OptimizerKind::kFtrl: {
      float* z = state;
      float* n = state + dim;
      for (uint32_t j = lane; j < dim; j += 32) {
        const float gj = effective_grad(o, g[j], w[j], scale);
        const float n_old = n[j] + o.initial_accumulator;
        const float n_new = n_old + gj * gj;
        const float sigma = (sqrtf(n_new) - sqrtf(n_old)) / lr;
        z[j] += gj - sigma * w[j];
        n[j] += gj * gj;
        const float abs_z = fabsf(z[j]);
        w[j] = abs_z <= o.ftrl_l1 ? 0.0f
                                  : -(z[j] - copysignf(o.ftrl_l1, z[j])) /
                                        ((o.ftrl_beta + sqrtf(n_new)) / lr + o.ftrl_l2);
      }
      break;
    }
  }
}

}  // namespace dynemb::ops_cuda

// Fused sparse optimizers: the update of one row `[embedding | optimizer state]` from its
// reduced gradient, written once for the host and CUDA devices.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "dynemb/core/host_device.hpp"

namespace dynemb {

enum class OptimizerKind : uint8_t { kSgd, kAdam, kAdaGrad, kRowWiseAdaGrad, kRmsProp, kFtrl };

// Hyper-parameters; each optimizer reads the ones its published rule names.
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = 0.01f;
  float beta1 = 0.9f;                // Adam
  float beta2 = 0.999f;              // Adam
  float eps = 1e-8f;                 // Adam, AdaGrad, row-wise AdaGrad, RMSProp
  float rho = 0.99f;                 // RMSProp's decay
  float initial_accumulator = 0.0f;  // AdaGrad, row-wise AdaGrad, FTRL's n (stored minus it)
  float ftrl_l1 = 0.0f;              // FTRL
  float ftrl_l2 = 0.0f;              // FTRL
  float ftrl_beta = 1.0f;            // FTRL
  float weight_decay = 0.0f;         // L2 term added to the gradient: g += weight_decay * w
  float clip_norm = 0.0f;            // > 0: scale a row's gradient to at most this L2 norm
  float clip_value = 0.0f;           // > 0: clamp each gradient element to [-v, v]
};

// Throws InvalidArgument naming the bad hyper-parameter, its value and its limit.
void validate_optimizer(const OptimizerOptions& options, const char* where);
// "sgd", "adam", "adagrad", "rowwise_adagrad", "rmsprop", "ftrl".
std::string to_string(OptimizerKind kind);
// Parses the names above.
OptimizerKind parse_optimizer(const std::string& name);

// Floats of optimizer state stored after a row's `dim` embedding floats.
DYNEMB_HD constexpr uint32_t optimizer_state_dim(OptimizerKind kind, uint32_t dim) {
  switch (kind) {
    case OptimizerKind::kAdam:
      return 2 * dim + 1;  // m, v, and the row's step count
    case OptimizerKind::kAdaGrad:
      return dim;  // sum of squares
    case OptimizerKind::kRowWiseAdaGrad:
      return 1;  // sum of mean squares
    case OptimizerKind::kRmsProp:
      return dim;  // mean square
    case OptimizerKind::kFtrl:
      return 2 * dim;  // z, n
    case OptimizerKind::kSgd:
    default:
      return 0;
  }
}

// Every optimizer state element of a fresh row is 0: accumulators that start at
// initial_accumulator (AdaGrad, row-wise AdaGrad, FTRL's n) are stored minus that value.

namespace optimizer_detail {

DYNEMB_HD float sqrtf_(float x) {
#if defined(__CUDA_ARCH__)
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

DYNEMB_HD float powf_(float x, float y) {
#if defined(__CUDA_ARCH__)
  return ::powf(x, y);
#else
  return std::pow(x, y);
#endif
}

// The gradient element after weight decay and value clipping (norm clipping is a row scale).
DYNEMB_HD float effective_grad(const OptimizerOptions& o, float g, float w, float scale) {
  g = g * scale + o.weight_decay * w;
  if (o.clip_value > 0.0f)
    g = g > o.clip_value ? o.clip_value : (g < -o.clip_value ? -o.clip_value : g);
  return g;
}

}  // namespace optimizer_detail

// How the elements of one row are shared out: a lane handles elements first, first + stride,
// ...; sum() adds a value over all lanes of the row, sync() orders the lanes, and the leader
// writes the row's scalars. One lane on the host; a warp's 32 lanes on the GPU.
struct SingleLane {
  DYNEMB_HD uint32_t first() const { return 0; }
  DYNEMB_HD uint32_t stride() const { return 1; }
  DYNEMB_HD float sum(float v) const { return v; }
  DYNEMB_HD void sync() const {}
  DYNEMB_HD bool leader() const { return true; }
};

// Applies one update of `grad` (dim floats) to `row` = [w (dim) | state], in place, with the
// published rule of o.kind (after clip_norm, weight decay and clip_value), on `lanes`.
template <class Lanes>
DYNEMB_HD void apply_optimizer_on(const OptimizerOptions& o, float* row, const float* grad,
                                  uint32_t dim, const Lanes& lanes) {
  using namespace optimizer_detail;
  const uint32_t first = lanes.first(), stride = lanes.stride();
  float scale = 1.0f;
  if (o.clip_norm > 0.0f) {
    float sq = 0.0f;
    for (uint32_t j = first; j < dim; j += stride) sq += grad[j] * grad[j];
    const float norm = sqrtf_(lanes.sum(sq));
    if (norm > o.clip_norm) scale = o.clip_norm / norm;
  }
  float* w = row;
  float* state = row + dim;
  const float lr = o.learning_rate;
  switch (o.kind) {
    case OptimizerKind::kSgd:
      for (uint32_t j = first; j < dim; j += stride) {
        w[j] -= lr * effective_grad(o, grad[j], w[j], scale);
      }
      break;
    case OptimizerKind::kAdam: {
      float* m = state;
      float* v = state + dim;
      uint32_t* step = reinterpret_cast<uint32_t*>(state + 2 * dim);
      const uint32_t t = *step + 1;
      lanes.sync();
      if (lanes.leader()) *step = t;
      const float bc1 = 1.0f - powf_(o.beta1, static_cast<float>(t));
      const float bc2 = 1.0f - powf_(o.beta2, static_cast<float>(t));
      for (uint32_t j = first; j < dim; j += stride) {
        const float g = effective_grad(o, grad[j], w[j], scale);
        m[j] = o.beta1 * m[j] + (1.0f - o.beta1) * g;
        v[j] = o.beta2 * v[j] + (1.0f - o.beta2) * g * g;
        const float m_hat = m[j] / bc1;
        const float v_hat = v[j] / bc2;
        w[j] -= lr * m_hat / (sqrtf_(v_hat) + o.eps);
      }
      break;
    }
    case OptimizerKind::kAdaGrad:
      for (uint32_t j = first; j < dim; j += stride) {
        const float g = effective_grad(o, grad[j], w[j], scale);
        state[j] += g * g;
        w[j] -= lr * g / (sqrtf_(state[j] + o.initial_accumulator) + o.eps);
      }
      break;
    case OptimizerKind::kRowWiseAdaGrad: {
      float sum_sq = 0.0f;
      for (uint32_t j = first; j < dim; j += stride) {
        const float g = effective_grad(o, grad[j], w[j], scale);
        sum_sq += g * g;
      }
      const float accumulated = state[0] + lanes.sum(sum_sq) / static_cast<float>(dim);
      const float step = lr / (sqrtf_(accumulated + o.initial_accumulator) + o.eps);
      for (uint32_t j = first; j < dim; j += stride) {
        w[j] -= step * effective_grad(o, grad[j], w[j], scale);
      }
      lanes.sync();
      if (lanes.leader()) state[0] = accumulated;
      break;
    }
    case OptimizerKind::kRmsProp:
      for (uint32_t j = first; j < dim; j += stride) {
        const float g = effective_grad(o, grad[j], w[j], scale);
        state[j] = o.rho * state[j] + (1.0f - o.rho) * g * g;
        w[j] -= lr * g / (sqrtf_(state[j]) + o.eps);
      }
      break;
    case OptimizerKind::kFtrl: {
      float* z = state;
      float* n = state + dim;
      for (uint32_t j = first; j < dim; j += stride) {
        const float g = effective_grad(o, grad[j], w[j], scale);
        const float n_old = n[j] + o.initial_accumulator;
        const float n_new = n_old + g * g;
        const float sigma = (sqrtf_(n_new) - sqrtf_(n_old)) / lr;
        z[j] += g - sigma * w[j];
        n[j] += g * g;
        const float abs_z = z[j] < 0.0f ? -z[j] : z[j];
        if (abs_z <= o.ftrl_l1) {
          w[j] = 0.0f;
        } else {
          const float sign_z = z[j] < 0.0f ? -1.0f : 1.0f;
          w[j] = -(z[j] - sign_z * o.ftrl_l1) / ((o.ftrl_beta + sqrtf_(n_new)) / lr + o.ftrl_l2);
        }
      }
      break;
    }
  }
}

// apply_optimizer_on with one lane: the host's row update.
DYNEMB_HD void apply_optimizer(const OptimizerOptions& o, float* row, const float* grad,
                               uint32_t dim) {
  apply_optimizer_on(o, row, grad, dim, SingleLane{});
}

}  // namespace dynemb

// Fused sparse optimizers: the update of one row `[embedding | optimizer state]` from its
// reduced gradient, written once for the host and CUDA devices.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "dynemb/core/host_device.hpp"
#include "dynemb/core/value_type.hpp"

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
  // How the rows store their embedding (set by the trainable table from its value type): float32,
  // or 16-bit elements packed two a word, followed by the float32 state at word
  // value_words(value_type, dim). The arithmetic is float32; the new weight is stored rounded to
  // nearest even, or stochastically when stochastic_rounding is set (16-bit types only).
  ValueType value_type = ValueType::kFloat32;
  bool stochastic_rounding = false;
  // bfloat16 rows (validate_optimizer refuses the others): the per-element state arrays (Adam's
  // m, v; AdaGrad's and RMSProp's accumulators; FTRL's z, n) are stored as value_type elements
  // too, each new value rounded stochastically (round to nearest would stall Adam's v: 0.999 v
  // rounds back to v in bf16); the scalars (Adam's step count, row-wise AdaGrad's accumulator)
  // stay 32-bit after the arrays (optimizer_state_words). Halves the state's bytes.
  bool state_in_value_type = false;

  // Equal kind and every setting.
  bool operator==(const OptimizerOptions&) const = default;
};

// Throws InvalidArgument naming the bad hyper-parameter, its value and its limit.
void validate_optimizer(const OptimizerOptions& options, const char* where);
// "sgd", "adam", "adagrad", "rowwise_adagrad", "rmsprop", "ftrl".
std::string to_string(OptimizerKind kind);
// Parses the names above.
OptimizerKind parse_optimizer(const std::string& name);

// Floats of optimizer state stored after a row's embedding (dim elements, value_words words).
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

// What the per-element state arrays are stored as: value_type with state_in_value_type, else
// float32.
DYNEMB_HD constexpr ValueType state_value_type(const OptimizerOptions& o) {
  return o.state_in_value_type ? o.value_type : ValueType::kFloat32;
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

// The lanes of a warp, whose order of addition every backend's row sums follow.
inline constexpr uint32_t kRowSumLanes = 32;

// How the elements of one row are shared out: a lane handles elements first, first + stride,
// ...; sum_over() adds a term over the row's elements in the warp's order (kRowSumLanes partial
// sums of elements j = l, l + 32, ... in ascending order, combined by an xor butterfly), so the
// host and the GPU round a row's norm alike; sync() orders the lanes, and the leader writes the
// row's scalars. One lane on the host; a warp's 32 lanes on the GPU.
struct SingleLane {
  DYNEMB_HD uint32_t first() const { return 0; }
  DYNEMB_HD uint32_t stride() const { return 1; }
  template <class Term>
  DYNEMB_HD float sum_over(uint32_t dim, const Term& term) const {
    float partial[kRowSumLanes] = {};
    for (uint32_t j = 0; j < dim; ++j) partial[j % kRowSumLanes] += term(j);
    for (uint32_t offset = kRowSumLanes / 2; offset > 0; offset /= 2) {
      float next[kRowSumLanes];
      for (uint32_t l = 0; l < kRowSumLanes; ++l) next[l] = partial[l] + partial[l ^ offset];
      for (uint32_t l = 0; l < kRowSumLanes; ++l) partial[l] = next[l];
    }
    return partial[0];
  }
  DYNEMB_HD void sync() const {}
  DYNEMB_HD bool leader() const { return true; }
};

// Per-element state arrays (each `dim` floats, right after the embedding) of an optimizer:
// Adam m, v; AdaGrad G; RMSProp v; FTRL z, n. Row-wise AdaGrad keeps one float, SGD none.
DYNEMB_HD constexpr uint32_t element_state_arrays(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kFtrl:
      return 2;
    case OptimizerKind::kAdaGrad:
    case OptimizerKind::kRmsProp:
      return 1;
    default:
      return 0;
  }
}

// Word offset, from the start of the state, of the state's 32-bit scalars (Adam's step count,
// row-wise AdaGrad's accumulator): after the element arrays, each value_words(state_type, dim).
DYNEMB_HD constexpr uint32_t state_scalar_offset(OptimizerKind kind, uint32_t dim,
                                                 ValueType state_type) {
  return element_state_arrays(kind) * value_words(state_type, dim);
}

// 32-bit words of optimizer state after a row's embedding: optimizer_state_dim with float32
// arrays; with 16-bit arrays (state_in_value_type) each array takes value_words(state_type, dim).
DYNEMB_HD constexpr uint32_t optimizer_state_words(OptimizerKind kind, uint32_t dim,
                                                   ValueType state_type) {
  const uint32_t scalars = optimizer_state_dim(kind, dim) - element_state_arrays(kind) * dim;
  return state_scalar_offset(kind, dim, state_type) + scalars;
}

// The constants of one row's update, known before its element pass (begin_row_update).
struct RowUpdate {
  float scale = 1.0f;         // clip_norm's factor on the gradient
  float step_size = 0.0f;     // Adam: lr / (1 - beta1^step)
  float inv_sqrt_bc2 = 1.0f;  // Adam: 1 / sqrt(1 - beta2^step)
  uint32_t step = 0;          // Adam: the row's step count after this update
  float accumulated = 0.0f;   // row-wise AdaGrad: the row's accumulator after this update
  float rowwise_rate = 0.0f;  // row-wise AdaGrad: lr / (sqrt(accumulated + initial) + eps)
};

// Reads what the row-wide part of the rule needs (gradient norm, Adam's step count, row-wise
// AdaGrad's mean square) from `row` = [w (dim kType elements) | state] and `grad`, on `lanes`;
// writes nothing.
template <class Lanes, ValueType kType = ValueType::kFloat32>
DYNEMB_HD RowUpdate begin_row_update(const OptimizerOptions& o, const float* row, const float* grad,
                                     uint32_t dim, const Lanes& lanes) {
  using namespace optimizer_detail;
  const float* state = row + value_words(kType, dim);
  RowUpdate u;
  if (o.clip_norm > 0.0f) {
    const float norm = sqrtf_(lanes.sum_over(dim, [&](uint32_t j) { return grad[j] * grad[j]; }));
    if (norm > o.clip_norm) u.scale = o.clip_norm / norm;
  }
  if (o.kind == OptimizerKind::kAdam) {
    const uint32_t scalars = state_scalar_offset(o.kind, dim, state_value_type(o));
    u.step = *reinterpret_cast<const uint32_t*>(state + scalars) + 1;
    const float bc1 = 1.0f - powf_(o.beta1, static_cast<float>(u.step));
    const float bc2 = 1.0f - powf_(o.beta2, static_cast<float>(u.step));
    u.step_size = o.learning_rate / bc1;
    u.inv_sqrt_bc2 = 1.0f / sqrtf_(bc2);
  } else if (o.kind == OptimizerKind::kRowWiseAdaGrad) {
    const float sum_sq = lanes.sum_over(dim, [&](uint32_t j) {
      const float g = effective_grad(o, grad[j], load_element<kType>(row, j), u.scale);
      return g * g;
    });
    u.accumulated = state[0] + sum_sq / static_cast<float>(dim);
    u.rowwise_rate = o.learning_rate / (sqrtf_(u.accumulated + o.initial_accumulator) + o.eps);
  }
  return u;
}

// Updates one element: its weight w, its state a = state[j] and b = state[dim + j] (those of
// element_state_arrays(kKind); the others are left alone) from its raw gradient.
template <OptimizerKind kKind>
DYNEMB_HD void update_element(const OptimizerOptions& o, const RowUpdate& u, float& w, float& a,
                              float& b, float grad) {
  using namespace optimizer_detail;
  const float lr = o.learning_rate;
  if constexpr (kKind == OptimizerKind::kSgd) {
    w -= lr * effective_grad(o, grad, w, u.scale);
  } else if constexpr (kKind == OptimizerKind::kAdam) {
    const float g = effective_grad(o, grad, w, u.scale);
    a = o.beta1 * a + (1.0f - o.beta1) * g;
    b = o.beta2 * b + (1.0f - o.beta2) * g * g;
    // lr * (a / bc1) / (sqrt(b / bc2) + eps), with the row's constants folded (PyTorch's form):
    // one division an element instead of three.
    w -= u.step_size * a / (sqrtf_(b) * u.inv_sqrt_bc2 + o.eps);
  } else if constexpr (kKind == OptimizerKind::kAdaGrad) {
    const float g = effective_grad(o, grad, w, u.scale);
    a += g * g;
    w -= lr * g / (sqrtf_(a + o.initial_accumulator) + o.eps);
  } else if constexpr (kKind == OptimizerKind::kRowWiseAdaGrad) {
    w -= u.rowwise_rate * effective_grad(o, grad, w, u.scale);
  } else if constexpr (kKind == OptimizerKind::kRmsProp) {
    const float g = effective_grad(o, grad, w, u.scale);
    a = o.rho * a + (1.0f - o.rho) * g * g;
    w -= lr * g / (sqrtf_(a) + o.eps);
  } else {  // FTRL-proximal: a = z, b = n (stored minus initial_accumulator)
    const float g = effective_grad(o, grad, w, u.scale);
    const float n_old = b + o.initial_accumulator;
    const float n_new = n_old + g * g;
    const float sigma = (sqrtf_(n_new) - sqrtf_(n_old)) / lr;
    a += g - sigma * w;
    b += g * g;
    const float abs_z = a < 0.0f ? -a : a;
    if (abs_z <= o.ftrl_l1) {
      w = 0.0f;
    } else {
      const float sign_z = a < 0.0f ? -1.0f : 1.0f;
      w = -(a - sign_z * o.ftrl_l1) / ((o.ftrl_beta + sqrtf_(n_new)) / lr + o.ftrl_l2);
    }
  }
}

// The random bits stochastic rounding uses for element j's new value `w` over the stored `old`
// bits: a hash of the three, so the host and the GPU round alike and a step is reproducible.
DYNEMB_HD uint32_t rounding_bits(float w, uint16_t old, uint32_t j) {
  return value_detail::mix32(value_detail::float_bits(w) ^ (j * 0x9E3779B9u) ^
                             (static_cast<uint32_t>(old) * 0x85EBCA6Bu));
}

// Stores the updated weight w as element j of a kType row (rounded per o.stochastic_rounding).
template <ValueType kType>
DYNEMB_HD void store_weight(const OptimizerOptions& o, float* row, uint32_t j, float w) {
  if constexpr (kType != ValueType::kFloat32) {
    if (o.stochastic_rounding) {
      uint16_t* p = reinterpret_cast<uint16_t*>(row) + j;
      *p = to_bits16_stochastic<kType>(w, rounding_bits(w, *p, j));
      return;
    }
  }
  store_element<kType>(row, j, w);
}

// Stores the new state value v as element j of the state array at `a` (kState elements): float32
// as is; 16-bit rounded stochastically, the bits drawn from v, the old bits and `salt` (the
// element's index among the row's weights and states, so no two elements share a draw).
template <ValueType kState>
DYNEMB_HD void store_state(float* a, uint32_t j, float v, uint32_t salt) {
  if constexpr (kState == ValueType::kFloat32) {
    a[j] = v;
  } else {
    uint16_t* p = reinterpret_cast<uint16_t*>(a) + j;
    *p = to_bits16_stochastic<kState>(v, rounding_bits(v, *p, salt));
  }
}

// update_row_elements with the state arrays stored as kState elements.
template <OptimizerKind kKind, class Lanes, ValueType kType, ValueType kState>
DYNEMB_HD void update_row_elements_as(const OptimizerOptions& o, const RowUpdate& u, float* row,
                                      const float* grad, uint32_t dim, const Lanes& lanes) {
  constexpr uint32_t kArrays = element_state_arrays(kKind);
  float* a = row + value_words(kType, dim);
  float* b = a + value_words(kState, dim);
  for (uint32_t j = lanes.first(); j < dim; j += lanes.stride()) {
    float sa = 0.0f, sb = 0.0f;
    if constexpr (kArrays >= 1) sa = load_element<kState>(a, j);
    if constexpr (kArrays >= 2) sb = load_element<kState>(b, j);
    if constexpr (kType == ValueType::kFloat32) {
      update_element<kKind>(o, u, row[j], sa, sb, grad[j]);
    } else {
      float w = load_element<kType>(row, j);
      update_element<kKind>(o, u, w, sa, sb, grad[j]);
      store_weight<kType>(o, row, j, w);
    }
    if constexpr (kArrays >= 1) store_state<kState>(a, j, sa, dim + j);
    if constexpr (kArrays >= 2) store_state<kState>(b, j, sb, 2 * dim + j);
  }
}

// The element pass of one row on `lanes`: update_element over the lane's elements (the weights
// as kType elements, the state after them as state_value_type(o) elements).
template <OptimizerKind kKind, class Lanes, ValueType kType = ValueType::kFloat32>
DYNEMB_HD void update_row_elements(const OptimizerOptions& o, const RowUpdate& u, float* row,
                                   const float* grad, uint32_t dim, const Lanes& lanes) {
  if constexpr (kType != ValueType::kFloat32) {
    if (o.state_in_value_type) {
      update_row_elements_as<kKind, Lanes, kType, kType>(o, u, row, grad, dim, lanes);
      return;
    }
  }
  update_row_elements_as<kKind, Lanes, kType, ValueType::kFloat32>(o, u, row, grad, dim, lanes);
}

// Writes the row's scalars (Adam's step count, row-wise AdaGrad's accumulator) once every lane
// is past begin_row_update.
template <class Lanes, ValueType kType = ValueType::kFloat32>
DYNEMB_HD void end_row_update(const OptimizerOptions& o, const RowUpdate& u, float* row,
                              uint32_t dim, const Lanes& lanes) {
  lanes.sync();
  if (!lanes.leader()) return;
  float* state = row + value_words(kType, dim);
  const uint32_t scalars = state_scalar_offset(o.kind, dim, state_value_type(o));
  if (o.kind == OptimizerKind::kAdam) *reinterpret_cast<uint32_t*>(state + scalars) = u.step;
  if (o.kind == OptimizerKind::kRowWiseAdaGrad) state[0] = u.accumulated;
}

// apply_optimizer_on for rows whose weights are kType elements.
template <ValueType kType, class Lanes>
DYNEMB_HD void apply_optimizer_typed(const OptimizerOptions& o, float* row, const float* grad,
                                     uint32_t dim, const Lanes& lanes) {
  const RowUpdate u = begin_row_update<Lanes, kType>(o, row, grad, dim, lanes);
  switch (o.kind) {
    case OptimizerKind::kSgd:
      update_row_elements<OptimizerKind::kSgd, Lanes, kType>(o, u, row, grad, dim, lanes);
      break;
    case OptimizerKind::kAdam:
      update_row_elements<OptimizerKind::kAdam, Lanes, kType>(o, u, row, grad, dim, lanes);
      break;
    case OptimizerKind::kAdaGrad:
      update_row_elements<OptimizerKind::kAdaGrad, Lanes, kType>(o, u, row, grad, dim, lanes);
      break;
    case OptimizerKind::kRowWiseAdaGrad:
      update_row_elements<OptimizerKind::kRowWiseAdaGrad, Lanes, kType>(o, u, row, grad, dim,
                                                                        lanes);
      break;
    case OptimizerKind::kRmsProp:
      update_row_elements<OptimizerKind::kRmsProp, Lanes, kType>(o, u, row, grad, dim, lanes);
      break;
    case OptimizerKind::kFtrl:
      update_row_elements<OptimizerKind::kFtrl, Lanes, kType>(o, u, row, grad, dim, lanes);
      break;
  }
  end_row_update<Lanes, kType>(o, u, row, dim, lanes);
}

// Applies one update of `grad` (dim floats) to `row` = [w (dim elements of o.value_type) | state
// (optimizer_state_words of state_value_type(o))],
// in place, with the published rule of o.kind (after clip_norm, weight decay and clip_value), on
// `lanes`.
template <class Lanes>
DYNEMB_HD void apply_optimizer_on(const OptimizerOptions& o, float* row, const float* grad,
                                  uint32_t dim, const Lanes& lanes) {
  switch (o.value_type) {
    case ValueType::kFloat16:
      return apply_optimizer_typed<ValueType::kFloat16>(o, row, grad, dim, lanes);
    case ValueType::kBFloat16:
      return apply_optimizer_typed<ValueType::kBFloat16>(o, row, grad, dim, lanes);
    default:
      return apply_optimizer_typed<ValueType::kFloat32>(o, row, grad, dim, lanes);
  }
}

// apply_optimizer_on with one lane: the host's row update.
DYNEMB_HD void apply_optimizer(const OptimizerOptions& o, float* row, const float* grad,
                               uint32_t dim) {
  apply_optimizer_on(o, row, grad, dim, SingleLane{});
}

}  // namespace dynemb

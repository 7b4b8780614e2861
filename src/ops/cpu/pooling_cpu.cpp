#include <algorithm>
#include <vector>

#include "ops/backends.hpp"

namespace dynemb::detail {
namespace {

// The factor id i's row is multiplied by in bag of length `len`.
float id_factor(const LookupFeature& x, int64_t i, int64_t len) {
  const float w = x.weights != nullptr ? x.weights[i] : 1.0f;
  return x.mode == PoolingMode::kMean ? w / static_cast<float>(len) : w;
}

}  // namespace

void pooled_lookup_cpu(std::span<const LookupFeature> features,
                       std::span<const LookupOutput> outputs) {
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    const LookupOutput& o = outputs[f];
    for (size_t b = 0; b < x.num_bags; ++b) {
      const int64_t begin = x.offsets[b], end = x.offsets[b + 1];
      if (x.mode == PoolingMode::kNone) {
        for (int64_t i = begin; i < end; ++i) {
          const float* row = x.rows + static_cast<size_t>(x.indices[i]) * x.row_stride;
          float* out = o.out + static_cast<size_t>(i) * o.out_stride;
          const float w = x.weights != nullptr ? x.weights[i] : 1.0f;
          for (uint32_t j = 0; j < x.dim; ++j) out[j] = w * row[j];
        }
        continue;
      }
      float* out = o.out + b * o.out_stride;
      std::fill(out, out + x.dim, 0.0f);
      for (int64_t i = begin; i < end; ++i) {
        const float* row = x.rows + static_cast<size_t>(x.indices[i]) * x.row_stride;
        const float factor = id_factor(x, i, end - begin);
        for (uint32_t j = 0; j < x.dim; ++j) out[j] += factor * row[j];
      }
    }
  }
}

void reduce_gradients_cpu(std::span<const LookupFeature> features,
                          std::span<const LookupOutput> grads,
                          std::span<const LookupOutput> row_grads) {
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    const LookupOutput& g = grads[f];
    const LookupOutput& r = row_grads[f];
    for (size_t row = 0; row < x.num_rows; ++row) {
      std::fill(r.out + row * r.out_stride, r.out + row * r.out_stride + x.dim, 0.0f);
    }
    // Ids visited in ascending order, so each row's additions happen in a fixed order.
    for (size_t b = 0; b < x.num_bags; ++b) {
      const int64_t begin = x.offsets[b], end = x.offsets[b + 1];
      for (int64_t i = begin; i < end; ++i) {
        const float* grad = x.mode == PoolingMode::kNone
                                ? g.out + static_cast<size_t>(i) * g.out_stride
                                : g.out + b * g.out_stride;
        const float factor = id_factor(x, i, end - begin);
        float* dst = r.out + static_cast<size_t>(x.indices[i]) * r.out_stride;
        for (uint32_t j = 0; j < x.dim; ++j) dst[j] += factor * grad[j];
      }
    }
  }
}

}  // namespace dynemb::detail

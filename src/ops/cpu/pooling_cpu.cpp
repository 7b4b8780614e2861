#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "cpu/cpu_kernels.hpp"
#include "cpu/parallel_for.hpp"
#include "id_factor.hpp"

namespace dynemb::ops::detail {

namespace {

// Row r of the feature: by address (nullptr: a row of zeros) or in the dense layout.
const float* row_of(const LookupFeature& x, uint32_t r) {
  return x.row_ptrs != nullptr ? x.row_ptrs[r] : x.rows + static_cast<size_t>(r) * x.row_stride;
}

}  // namespace

namespace {

// The bags [first_bag, last_bag) of one feature whose rows hold kType elements, written as kOut
// elements: sums in float32 (`acc`, dim floats of scratch for 16-bit outputs), each output row
// rounded once as it is stored (an odd dim's last half-word is left as it is).
template <ValueType kType, ValueType kOut>
void pool_bags(const LookupFeature& x, const LookupOutput& o, size_t first_bag, size_t last_bag,
               float* acc) {
  const auto out_row = [&](size_t r) { return o.out + r * o.out_stride; };
  // Where a row's float32 values are formed: the output itself, or acc before it is rounded.
  const auto target = [&](size_t r) { return kOut == ValueType::kFloat32 ? out_row(r) : acc; };
  const auto written = [&](size_t r) {
    if constexpr (kOut != ValueType::kFloat32) {
      float* out = out_row(r);
      for (uint32_t j = 0; j < x.dim; ++j) store_element<kOut>(out, j, acc[j]);
    }
  };
  for (size_t b = first_bag; b < last_bag; ++b) {
    const int64_t begin = x.offsets[b], end = x.offsets[b + 1];
    if (x.mode == PoolingMode::kNone) {
      for (int64_t i = begin; i < end; ++i) {
        const float* row = row_of(x, x.indices[i]);
        float* out = target(static_cast<size_t>(i));
        const float w = x.weights != nullptr ? x.weights[i] : 1.0f;
        if (row != nullptr) {
          for (uint32_t j = 0; j < x.dim; ++j) out[j] = w * load_element<kType>(row, j);
        } else {
          for (uint32_t j = 0; j < x.dim; ++j) out[j] = w * 0.0f;
        }
        written(static_cast<size_t>(i));
      }
      continue;
    }
    float* out = target(b);
    std::fill(out, out + x.dim, 0.0f);
    for (int64_t i = begin; i < end; ++i) {
      const float* row = row_of(x, x.indices[i]);
      const float factor = id_factor(x, i, end - begin);
      if (row != nullptr) {
        for (uint32_t j = 0; j < x.dim; ++j) out[j] += factor * load_element<kType>(row, j);
      } else {
        // The same additions as a row of zeros (they can turn -0 into +0).
        for (uint32_t j = 0; j < x.dim; ++j) out[j] += factor * 0.0f;
      }
    }
    written(b);
  }
}

// pool_bags for the output type o.type (float32, or kType itself).
template <ValueType kType>
void pool_bags_to(const LookupFeature& x, const LookupOutput& o, size_t first_bag,
                  size_t last_bag) {
  if constexpr (kType != ValueType::kFloat32) {
    if (o.type == kType) {
      std::vector<float> acc(x.dim);
      return pool_bags<kType, kType>(x, o, first_bag, last_bag, acc.data());
    }
  }
  pool_bags<kType, ValueType::kFloat32>(x, o, first_bag, last_bag, nullptr);
}

}  // namespace

void pooled_lookup_cpu(std::span<const LookupFeature> features,
                       std::span<const LookupOutput> outputs) {
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    const LookupOutput& o = outputs[f];
    parallel_for(x.num_bags, 256, [&](size_t first_bag, size_t last_bag) {
      switch (x.value_type) {
        case ValueType::kFloat16:
          return pool_bags_to<ValueType::kFloat16>(x, o, first_bag, last_bag);
        case ValueType::kBFloat16:
          return pool_bags_to<ValueType::kBFloat16>(x, o, first_bag, last_bag);
        default:
          return pool_bags_to<ValueType::kFloat32>(x, o, first_bag, last_bag);
      }
    });
  }
}

void group_ids_cpu(size_t num_ids, const uint32_t* indices, size_t num_rows, uint32_t* ids_by_row,
                   uint32_t* row_begin) {
  // A stable counting sort by row.
  std::fill(row_begin, row_begin + num_rows + 1, 0u);
  for (size_t i = 0; i < num_ids; ++i) ++row_begin[indices[i] + 1];
  for (size_t row = 0; row < num_rows; ++row) row_begin[row + 1] += row_begin[row];
  std::vector<uint32_t> fill(row_begin, row_begin + num_rows);
  for (size_t i = 0; i < num_ids; ++i) ids_by_row[fill[indices[i]]++] = static_cast<uint32_t>(i);
}

namespace {

// bag_of[i] = the bag holding id i.
std::vector<uint32_t> bags_of_ids(size_t num_ids, const int64_t* offsets, size_t num_bags) {
  std::vector<uint32_t> bag_of(num_ids);
  for (size_t b = 0; b < num_bags; ++b) {
    for (int64_t i = offsets[b]; i < offsets[b + 1]; ++i) bag_of[i] = static_cast<uint32_t>(b);
  }
  return bag_of;
}
std::vector<uint32_t> bags_of_ids(const LookupFeature& x) {
  return bags_of_ids(x.num_ids, x.offsets, x.num_bags);
}

}  // namespace

void bags_by_row_cpu(size_t num_ids, const uint32_t* ids_by_row, const int64_t* offsets,
                     size_t num_bags, uint32_t* bag_by_row) {
  const std::vector<uint32_t> bag_of = bags_of_ids(num_ids, offsets, num_bags);
  for (size_t k = 0; k < num_ids; ++k) bag_by_row[k] = bag_of[ids_by_row[k]];
}

namespace {

// Row `row`'s gradient into dst (dim floats): chunks of kGradientChunk ids, each summed from zero,
// then added in order (reduce_gradients' fixed order), each gradient element read as kGradType
// (g.type) converted to float32. `partial` holds dim floats of scratch.
template <ValueType kGradType>
void sum_row_gradient_as(const LookupFeature& x, IdGroups groups, const LookupOutput& g,
                         const uint32_t* bag_of, size_t row, float* dst, float* partial) {
  const uint32_t* row_begin = groups.row_begin;
  std::fill(dst, dst + x.dim, 0.0f);
  for (uint32_t c = row_begin[row]; c < row_begin[row + 1]; c += kGradientChunk) {
    const uint32_t chunk_end = std::min(c + kGradientChunk, row_begin[row + 1]);
    std::fill(partial, partial + x.dim, 0.0f);
    for (uint32_t k = c; k < chunk_end; ++k) {
      const uint32_t i = groups.ids_by_row[k];
      const uint32_t b = bag_of[i];
      const float* grad = x.mode == PoolingMode::kNone ? g.out + size_t{i} * g.out_stride
                                                       : g.out + size_t{b} * g.out_stride;
      const float factor = id_factor(x, i, x.offsets[b + 1] - x.offsets[b]);
      for (uint32_t j = 0; j < x.dim; ++j) {
        partial[j] += factor * load_element<kGradType>(grad, j);
      }
    }
    for (uint32_t j = 0; j < x.dim; ++j) dst[j] += partial[j];
  }
}

void sum_row_gradient(const LookupFeature& x, IdGroups groups, const LookupOutput& g,
                      const uint32_t* bag_of, size_t row, float* dst, float* partial) {
  switch (g.type) {
    case ValueType::kFloat16:
      return sum_row_gradient_as<ValueType::kFloat16>(x, groups, g, bag_of, row, dst, partial);
    case ValueType::kBFloat16:
      return sum_row_gradient_as<ValueType::kBFloat16>(x, groups, g, bag_of, row, dst, partial);
    default:
      return sum_row_gradient_as<ValueType::kFloat32>(x, groups, g, bag_of, row, dst, partial);
  }
}

}  // namespace

void reduce_gradients_grouped_cpu(const LookupFeature& x, IdGroups groups, const LookupOutput& g,
                                  const LookupOutput& r) {
  const std::vector<uint32_t> bag_of = bags_of_ids(x);
  parallel_for(x.num_rows, 256, [&](size_t first_row, size_t last_row) {
    std::vector<float> partial(x.dim);
    for (size_t row = first_row; row < last_row; ++row) {
      sum_row_gradient(x, groups, g, bag_of.data(), row, r.out + row * r.out_stride,
                       partial.data());
    }
  });
}

void reduce_and_optimize_row_ptrs_cpu(const OptimizerOptions& o, const LookupFeature& x,
                                      IdGroups groups, const LookupOutput& g, float* const* rows,
                                      const bool* skip, uint64_t* nonfinite) {
  const std::vector<uint32_t> bag_of = bags_of_ids(x);
  std::atomic<uint64_t> bad_rows{0};
  parallel_for(x.num_rows, 256, [&](size_t first_row, size_t last_row) {
    std::vector<float> grad(x.dim), partial(x.dim);
    uint64_t bad = 0;
    for (size_t row = first_row; row < last_row; ++row) {
      sum_row_gradient(x, groups, g, bag_of.data(), row, grad.data(), partial.data());
      if (nonfinite != nullptr) {
        bool finite = true;
        for (uint32_t j = 0; j < x.dim; ++j) finite &= std::isfinite(grad[j]);
        if (!finite) {
          ++bad;
          continue;
        }
      }
      if (rows[row] == nullptr || (skip != nullptr && skip[row])) continue;
      apply_optimizer(o, rows[row], grad.data(), x.dim);
    }
    bad_rows += bad;
  });
  if (nonfinite != nullptr) *nonfinite += bad_rows.load();
}

void reduce_gradients_cpu(std::span<const LookupFeature> features,
                          std::span<const LookupOutput> grads,
                          std::span<const LookupOutput> row_grads) {
  std::vector<uint32_t> row_begin, ids_by_row;
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& x = features[f];
    row_begin.resize(x.num_rows + 1);
    ids_by_row.resize(x.num_ids);
    group_ids_cpu(x.num_ids, x.indices, x.num_rows, ids_by_row.data(), row_begin.data());
    reduce_gradients_grouped_cpu(x, {ids_by_row.data(), row_begin.data()}, grads[f], row_grads[f]);
  }
}

}  // namespace dynemb::ops::detail

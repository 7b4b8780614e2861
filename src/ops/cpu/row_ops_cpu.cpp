#include <atomic>
#include <cmath>
#include <cstring>

#include "cpu/cpu_kernels.hpp"
#include "cpu/parallel_for.hpp"
#include "dynemb/ops/row_ops.hpp"

namespace dynemb::ops::detail {

void gather_rows_cpu(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                     float* dst, uint32_t dst_stride, uint32_t width) {
  parallel_for(n, 1024, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      std::memcpy(dst + i * dst_stride, src + static_cast<size_t>(index[i]) * src_stride,
                  width * sizeof(float));
    }
  });
}

void scatter_rows_cpu(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                      float* dst, uint32_t dst_stride, uint32_t width) {
  parallel_for(n, 1024, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      std::memcpy(dst + static_cast<size_t>(index[i]) * dst_stride, src + i * src_stride,
                  width * sizeof(float));
    }
  });
}

template <TableKey K>
void fill_initial_rows_cpu(size_t n, const K* keys, const bool* flags, bool when,
                           const InitializerOptions& init, float* rows, uint32_t stride,
                           uint32_t width) {
  parallel_for(n, 256, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      if (flags == nullptr || flags[i] == when) {
        fill_initial_row(init, key_bits(keys[i]), rows + i * stride, width);
      }
    }
  });
}

size_t select_indices_cpu(size_t n, const bool* flags, bool value, uint32_t* out) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (flags[i] == value) out[count++] = static_cast<uint32_t>(i);
  }
  return count;
}

size_t flag_nonfinite_rows_cpu(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                               bool* flags) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    bool bad = false;
    for (uint32_t j = 0; j < dim; ++j) bad |= !std::isfinite(grads[i * stride + j]);
    flags[i] = bad;
    count += bad;
  }
  return count;
}

void apply_optimizer_rows_cpu(const OptimizerOptions& o, size_t n, float* rows, uint32_t row_stride,
                              const float* grads, uint32_t grad_stride, uint32_t dim,
                              const bool* skip) {
  parallel_for(n, 256, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      if (skip != nullptr && skip[i]) continue;
      apply_optimizer(o, rows + i * row_stride, grads + i * grad_stride, dim);
    }
  });
}

void apply_optimizer_rows_guarded_cpu(const OptimizerOptions& o, size_t n, float* rows,
                                      uint32_t row_stride, const float* grads, uint32_t grad_stride,
                                      uint32_t dim, const bool* skip, uint64_t* nonfinite) {
  std::atomic<uint64_t> bad_rows{0};
  parallel_for(n, 256, [&](size_t first, size_t last) {
    uint64_t bad = 0;
    for (size_t i = first; i < last; ++i) {
      const float* grad = grads + i * grad_stride;
      bool finite = true;
      for (uint32_t j = 0; j < dim; ++j) finite &= std::isfinite(grad[j]);
      if (!finite) {
        ++bad;
        continue;
      }
      if (skip != nullptr && skip[i]) continue;
      apply_optimizer(o, rows + i * row_stride, grad, dim);
    }
    bad_rows += bad;
  });
  *nonfinite += bad_rows.load();
}

void apply_optimizer_row_ptrs_cpu(const OptimizerOptions& o, size_t n, float* const* rows,
                                  const float* grads, uint32_t grad_stride, uint32_t dim,
                                  const bool* skip, uint64_t* nonfinite) {
  std::atomic<uint64_t> bad_rows{0};
  parallel_for(n, 256, [&](size_t first, size_t last) {
    uint64_t bad = 0;
    for (size_t i = first; i < last; ++i) {
      const float* grad = grads + i * grad_stride;
      if (nonfinite != nullptr) {
        bool finite = true;
        for (uint32_t j = 0; j < dim; ++j) finite &= std::isfinite(grad[j]);
        if (!finite) {
          ++bad;
          continue;
        }
      }
      if (rows[i] == nullptr || (skip != nullptr && skip[i])) continue;
      apply_optimizer(o, rows[i], grad, dim);
    }
    bad_rows += bad;
  });
  if (nonfinite != nullptr) *nonfinite += bad_rows.load();
}

void resolve_missing_rows_cpu(size_t n, float** rows, bool* missing, float* fallback,
                              uint32_t fallback_stride, const bool* founds, uint64_t* created,
                              uint64_t* missing_count) {
  uint64_t made = 0, lacking = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool none = rows[i] == nullptr;
    missing[i] = none;
    if (none) {
      rows[i] = fallback + i * fallback_stride;
      ++lacking;
    } else if (founds != nullptr && !founds[i]) {
      ++made;
    }
  }
  if (created != nullptr) *created += made;
  if (missing_count != nullptr) *missing_count += lacking;
}

template void fill_initial_rows_cpu<int64_t>(size_t, const int64_t*, const bool*, bool,
                                             const InitializerOptions&, float*, uint32_t, uint32_t);
template void fill_initial_rows_cpu<uint64_t>(size_t, const uint64_t*, const bool*, bool,
                                              const InitializerOptions&, float*, uint32_t,
                                              uint32_t);

}  // namespace dynemb::ops::detail

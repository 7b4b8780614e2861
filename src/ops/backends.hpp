// Each backend's implementation of the ops, called only by the dispatchers in src/ops/*.cpp.
#pragma once

#include <span>
#include <string>

#include "dynemb/core/error.hpp"

#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/pooling.hpp"
#include "dynemb/ops/row_ops.hpp"

namespace dynemb::detail {

// Throws NotAvailable unless `backend` is the CPU (the CUDA ops are the next step).
inline void require_cpu_ops(Backend backend, const char* where) {
  if (backend != Backend::kCpu) {
    throw NotAvailable(std::string(where) + ": backend = cuda, the CUDA ops are not built yet");
  }
}

template <TableKey K>
size_t dedup_cpu(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts);

void pooled_lookup_cpu(std::span<const LookupFeature> features,
                       std::span<const LookupOutput> outputs);

void reduce_gradients_cpu(std::span<const LookupFeature> features,
                          std::span<const LookupOutput> grads,
                          std::span<const LookupOutput> row_grads);

void gather_rows_cpu(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                     float* dst, uint32_t dst_stride, uint32_t width);
void scatter_rows_cpu(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                      float* dst, uint32_t dst_stride, uint32_t width);
template <TableKey K>
void fill_initial_rows_cpu(size_t n, const K* keys, const bool* flags, bool when,
                           const InitializerOptions& init, float* rows, uint32_t stride,
                           uint32_t width);
size_t select_indices_cpu(size_t n, const bool* flags, bool value, uint32_t* out);
size_t flag_nonfinite_rows_cpu(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                               bool* flags);
void apply_optimizer_rows_cpu(const OptimizerOptions& o, size_t n, float* rows, uint32_t row_stride,
                              const float* grads, uint32_t grad_stride, uint32_t dim,
                              const bool* skip);

// Checks every feature's shape, offsets and indices (host memory); throws InvalidArgument
// naming `where`, the feature, the argument, its value and its limit.
void validate_lookup_host(const char* where, std::span<const LookupFeature> features,
                          std::span<const LookupOutput> outputs, const char* outputs_name);

}  // namespace dynemb::detail

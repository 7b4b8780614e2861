// Row-level building blocks of a training step: gather / scatter by index, initializer rows,
// selection by flag, the non-finite gradient check and the fused optimizer over many rows.
// Each runs on the backend whose memory holds the pointers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dynemb/core/initializer.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/ops/optimizer.hpp"
#include "dynemb/table/table.hpp"

namespace dynemb {

// dst row i = src row index[i], `width` floats each (strides in floats).
void gather_rows(Backend backend, size_t n, const uint32_t* index, const float* src,
                 uint32_t src_stride, float* dst, uint32_t dst_stride, uint32_t width,
                 StreamHandle stream = nullptr);

// dst row index[i] = src row i, `width` floats each.
void scatter_rows(Backend backend, size_t n, const uint32_t* index, const float* src,
                  uint32_t src_stride, float* dst, uint32_t dst_stride, uint32_t width,
                  StreamHandle stream = nullptr);

// Writes the initializer row of keys[i] (`width` 32-bit words, in init.value_type's packing:
// fill_initial_row) to rows + i * stride wherever flags is null or flags[i] == when.
template <TableKey K>
void fill_initial_rows(Backend backend, size_t n, const K* keys, const bool* flags, bool when,
                       const InitializerOptions& init, float* rows, uint32_t stride, uint32_t width,
                       StreamHandle stream = nullptr);

// Writes the ascending positions i with flags[i] == value to out; returns how many
// (synchronizes on CUDA).
size_t select_indices(Backend backend, size_t n, const bool* flags, bool value, uint32_t* out,
                      StreamHandle stream = nullptr);

// flags[i] = value for i in [0, n).
void fill_flags(Backend backend, size_t n, bool value, bool* flags, StreamHandle stream = nullptr);

// out[i] = out[i] || (flags[i] == when) for i in [0, n).
void or_flags(Backend backend, size_t n, const bool* flags, bool when, bool* out,
              StreamHandle stream = nullptr);

// flags[i] = whether gradient row i (dim floats at grads + i * stride) holds a NaN or Inf;
// returns how many rows do (synchronizes on CUDA).
size_t flag_nonfinite_rows(Backend backend, size_t n, const float* grads, uint32_t stride,
                           uint32_t dim, bool* flags, StreamHandle stream = nullptr);

// Applies the optimizer to rows i (row_stride floats: [w | state]) with gradient rows i,
// skipping rows where skip is not null and skip[i] is true.
void apply_optimizer_rows(Backend backend, const OptimizerOptions& optimizer, size_t n, float* rows,
                          uint32_t row_stride, const float* grads, uint32_t grad_stride,
                          uint32_t dim, const bool* skip, StreamHandle stream = nullptr);

// apply_optimizer_rows on rows by address: row i ([w | state]) at rows[i], updated in place
// (e.g. through a table's find_or_insert_pointers output); a null rows[i] is skipped, as is a
// row with skip[i] set. Distinct non-null addresses must not overlap. Bit-identical to
// apply_optimizer_rows on the same rows.
void apply_optimizer_row_ptrs(Backend backend, const OptimizerOptions& optimizer, size_t n,
                              float* const* rows, const float* grads, uint32_t grad_stride,
                              uint32_t dim, const bool* skip, StreamHandle stream = nullptr);

}  // namespace dynemb

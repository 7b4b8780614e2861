// The row ops: their arguments checked, then the backend's ops.
#include "dynemb/ops/row_ops.hpp"

#include "dynemb/core/error.hpp"
#include "dynemb/ops/ops_backend.hpp"

namespace dynemb {
namespace {

void require_ptr(const void* p, size_t n, const char* where, const char* argument) {
  require(n == 0 || p != nullptr, where, argument, "nullptr",
          "must be non-null when n = " + std::to_string(n));
}

}  // namespace

void gather_rows(Backend backend, size_t n, const uint32_t* index, const float* src,
                 uint32_t src_stride, float* dst, uint32_t dst_stride, uint32_t width,
                 StreamHandle stream) {
  require_ptr(index, n, "gather_rows", "index");
  require_ptr(src, n, "gather_rows", "src");
  require_ptr(dst, n, "gather_rows", "dst");
  ops_backend(backend).gather_rows(n, index, src, src_stride, dst, dst_stride, width, stream);
}

void scatter_rows(Backend backend, size_t n, const uint32_t* index, const float* src,
                  uint32_t src_stride, float* dst, uint32_t dst_stride, uint32_t width,
                  StreamHandle stream) {
  require_ptr(index, n, "scatter_rows", "index");
  require_ptr(src, n, "scatter_rows", "src");
  require_ptr(dst, n, "scatter_rows", "dst");
  ops_backend(backend).scatter_rows(n, index, src, src_stride, dst, dst_stride, width, stream);
}

template <TableKey K>
void fill_initial_rows(Backend backend, size_t n, const K* keys, const bool* flags, bool when,
                       const InitializerOptions& init, float* rows, uint32_t stride, uint32_t width,
                       StreamHandle stream) {
  require_ptr(keys, n, "fill_initial_rows", "keys");
  require_ptr(rows, n, "fill_initial_rows", "rows");
  ops_backend(backend).fill_initial_rows(n, keys, flags, when, init, rows, stride, width, stream);
}

size_t select_indices(Backend backend, size_t n, const bool* flags, bool value, uint32_t* out,
                      StreamHandle stream) {
  require_ptr(flags, n, "select_indices", "flags");
  require_ptr(out, n, "select_indices", "out");
  return ops_backend(backend).select_indices(n, flags, value, out, stream);
}

void fill_flags(Backend backend, size_t n, bool value, bool* flags, StreamHandle stream) {
  require_ptr(flags, n, "fill_flags", "flags");
  ops_backend(backend).fill_flags(n, value, flags, stream);
}

void or_flags(Backend backend, size_t n, const bool* flags, bool when, bool* out,
              StreamHandle stream) {
  require_ptr(flags, n, "or_flags", "flags");
  require_ptr(out, n, "or_flags", "out");
  ops_backend(backend).or_flags(n, flags, when, out, stream);
}

size_t flag_nonfinite_rows(Backend backend, size_t n, const float* grads, uint32_t stride,
                           uint32_t dim, bool* flags, StreamHandle stream) {
  require_ptr(grads, n, "flag_nonfinite_rows", "grads");
  require_ptr(flags, n, "flag_nonfinite_rows", "flags");
  return ops_backend(backend).flag_nonfinite_rows(n, grads, stride, dim, flags, stream);
}

void apply_optimizer_rows(Backend backend, const OptimizerOptions& optimizer, size_t n, float* rows,
                          uint32_t row_stride, const float* grads, uint32_t grad_stride,
                          uint32_t dim, const bool* skip, StreamHandle stream) {
  require_ptr(rows, n, "apply_optimizer_rows", "rows");
  require_ptr(grads, n, "apply_optimizer_rows", "grads");
  ops_backend(backend).apply_optimizer_rows(optimizer, n, rows, row_stride, grads, grad_stride, dim,
                                            skip, stream);
}

void apply_optimizer_row_ptrs(Backend backend, const OptimizerOptions& optimizer, size_t n,
                              float* const* rows, const float* grads, uint32_t grad_stride,
                              uint32_t dim, const bool* skip, StreamHandle stream) {
  require_ptr(rows, n, "apply_optimizer_row_ptrs", "rows");
  require_ptr(grads, n, "apply_optimizer_row_ptrs", "grads");
  ops_backend(backend).apply_optimizer_row_ptrs(optimizer, n, rows, grads, grad_stride, dim, skip,
                                                nullptr, stream);
}

template void fill_initial_rows<int64_t>(Backend, size_t, const int64_t*, const bool*, bool,
                                         const InitializerOptions&, float*, uint32_t, uint32_t,
                                         StreamHandle);
template void fill_initial_rows<uint64_t>(Backend, size_t, const uint64_t*, const bool*, bool,
                                          const InitializerOptions&, float*, uint32_t, uint32_t,
                                          StreamHandle);

}  // namespace dynemb

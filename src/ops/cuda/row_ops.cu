// The row ops on the GPU.
#include <thrust/iterator/counting_iterator.h>
#include <cub/device/device_select.cuh>

#include <cmath>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "cuda/optimizer_warp.cuh"
#include "cuda/tile_lanes.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"
#include "dynemb/core/initializer.hpp"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::as_stream;
using ops::cuda::blocks_for_threads;
using ops::cuda::blocks_for_warps;
using ops::cuda::gradient_nonfinite;
using ops::cuda::kBlock;
using ops::cuda::lane_index;
using ops::cuda::update_row;
using ops::cuda::warp_index;

// One warp per row; float4 lanes when kVec = 4 (strides, pointers and width allow it).
template <bool kScatter, uint32_t kVec>
__global__ void move_rows_kernel(size_t n, const uint32_t* index, const float* src,
                                 uint32_t src_stride, float* dst, uint32_t dst_stride,
                                 uint32_t width) {
  const size_t i = warp_index();
  if (i >= n) return;
  const size_t from = kScatter ? i : index[i];
  const size_t to = kScatter ? index[i] : i;
  const float* s = src + from * src_stride;
  float* d = dst + to * dst_stride;
  if constexpr (kVec == 4) {
    for (uint32_t j = 4 * lane_index(); j < width; j += 128) {
      *reinterpret_cast<float4*>(d + j) = *reinterpret_cast<const float4*>(s + j);
    }
  } else {
    for (uint32_t j = lane_index(); j < width; j += 32) d[j] = s[j];
  }
}

template <class K>
__global__ void fill_initial_kernel(size_t n, const K* keys, const bool* flags, bool when,
                                    InitializerOptions init, float* rows, uint32_t stride,
                                    uint32_t width) {
  const size_t i = warp_index();
  if (i >= n || (flags != nullptr && flags[i] != when)) return;
  const uint64_t bits = key_bits(keys[i]);
  for (uint32_t j = lane_index(); j < width; j += 32) {
    rows[i * stride + j] = __uint_as_float(initial_word(init, bits, j));
  }
}

struct FlagEquals {
  const bool* flags;
  bool value;
  __device__ bool operator()(uint32_t i) const { return flags[i] == value; }
};

__global__ void fill_flags_kernel(size_t n, bool value, bool* flags) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) flags[i] = value;
}

__global__ void or_flags_kernel(size_t n, const bool* flags, bool when, bool* out) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = out[i] || flags[i] == when;
}

__global__ void nonfinite_kernel(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                                 bool* flags, unsigned long long* count) {
  const size_t i = warp_index();
  if (i >= n) return;
  bool bad = false;
  for (uint32_t j = lane_index(); j < dim; j += 32) bad |= !isfinite(grads[i * stride + j]);
  bad = __any_sync(0xFFFFFFFFu, bad);
  if (lane_index() == 0) {
    flags[i] = bad;
    if (bad) atomicAdd(count, 1ull);
  }
}

// Rows to update in the dense layout: row i at base + i * stride.
struct DenseRowsOut {
  float* base;
  uint32_t stride;
  static constexpr bool kByAddress = false;
  __device__ float* row(size_t i) const { return base + i * stride; }
};

// Rows to update by address: row i at ptrs[i] (nullptr: not updated).
struct AddressedRowsOut {
  float* const* ptrs;
  static constexpr bool kByAddress = true;
  __device__ float* row(size_t i) const { return ptrs[i]; }
};

// One warp per row: optimize_row (optimizer_warp.cuh). kVec = 4: float4 lanes (rows, grads,
// strides and dim allow it; by address, a row not 16-byte aligned takes the per-element path, same
// arithmetic). A non-null `nonfinite` makes the warp check its gradient row first: a row with a
// NaN / Inf is counted, not updated.
template <OptimizerKind kKind, uint32_t kVec, class Rows>
__global__ void optimizer_kernel(OptimizerOptions o, size_t n, Rows rows, const float* grads,
                                 uint32_t grad_stride, uint32_t dim, const bool* skip,
                                 unsigned long long* nonfinite) {
  const size_t i = warp_index();
  if (i >= n) return;
  const float* grad = grads + i * grad_stride;
  if (nonfinite != nullptr && gradient_nonfinite<kVec>(grad, dim, nonfinite)) return;
  if (skip != nullptr && skip[i]) return;
  float* row = rows.row(i);
  if constexpr (Rows::kByAddress) {
    if (row == nullptr) return;
  }
  update_row<kKind, kVec, Rows::kByAddress>(o, row, grad, dim);
}

template <OptimizerKind kKind, class Rows>
void launch_optimizer(const OptimizerOptions& o, size_t n, const Rows& rows, bool vec,
                      const float* grads, uint32_t grad_stride, uint32_t dim, const bool* skip,
                      unsigned long long* nonfinite, cudaStream_t stream) {
  if (vec) {
    optimizer_kernel<kKind, 4><<<blocks_for_warps(n), kBlock, 0, stream>>>(
        o, n, rows, grads, grad_stride, dim, skip, nonfinite);
  } else {
    optimizer_kernel<kKind, 1><<<blocks_for_warps(n), kBlock, 0, stream>>>(
        o, n, rows, grads, grad_stride, dim, skip, nonfinite);
  }
  core::cuda::check_launch("apply_optimizer_rows");
}

// Launches the optimizer kernel of o.kind; `vec`: float4 lanes allowed for the rows.
template <class Rows>
void launch_optimizer_any(const OptimizerOptions& o, size_t n, const Rows& rows, bool rows_vec,
                          const float* grads, uint32_t grad_stride, uint32_t dim, const bool* skip,
                          unsigned long long* nonfinite, cudaStream_t stream) {
  const bool vec = rows_vec && ops::cuda::vec4_ok(grads, grad_stride, dim);
  switch (o.kind) {
    case OptimizerKind::kSgd:
      return launch_optimizer<OptimizerKind::kSgd>(o, n, rows, vec, grads, grad_stride, dim, skip,
                                                   nonfinite, stream);
    case OptimizerKind::kAdam:
      return launch_optimizer<OptimizerKind::kAdam>(o, n, rows, vec, grads, grad_stride, dim, skip,
                                                    nonfinite, stream);
    case OptimizerKind::kAdaGrad:
      return launch_optimizer<OptimizerKind::kAdaGrad>(o, n, rows, vec, grads, grad_stride, dim,
                                                       skip, nonfinite, stream);
    case OptimizerKind::kRowWiseAdaGrad:
      return launch_optimizer<OptimizerKind::kRowWiseAdaGrad>(o, n, rows, vec, grads, grad_stride,
                                                              dim, skip, nonfinite, stream);
    case OptimizerKind::kRmsProp:
      return launch_optimizer<OptimizerKind::kRmsProp>(o, n, rows, vec, grads, grad_stride, dim,
                                                       skip, nonfinite, stream);
    case OptimizerKind::kFtrl:
      return launch_optimizer<OptimizerKind::kFtrl>(o, n, rows, vec, grads, grad_stride, dim, skip,
                                                    nonfinite, stream);
  }
}

// Dense rows: float4 lanes when base, stride and dim allow.
void launch_optimizer_dense(const OptimizerOptions& o, size_t n, float* rows, uint32_t row_stride,
                            const float* grads, uint32_t grad_stride, uint32_t dim,
                            const bool* skip, unsigned long long* nonfinite, cudaStream_t stream) {
  launch_optimizer_any(o, n, DenseRowsOut{rows, row_stride},
                       ops::cuda::vec4_ok(rows, row_stride, dim), grads, grad_stride, dim, skip,
                       nonfinite, stream);
}

// missing[i] = rows[i] is null, which then points at fallback + i * stride; counts added once
// per warp.
__global__ void resolve_missing_kernel(size_t n, float** rows, bool* missing, float* fallback,
                                       uint32_t fallback_stride, const bool* founds,
                                       unsigned long long* created,
                                       unsigned long long* missing_count) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool none = false, made = false;
  if (i < n) {
    none = rows[i] == nullptr;
    missing[i] = none;
    if (none) rows[i] = fallback + i * fallback_stride;
    made = !none && founds != nullptr && !founds[i];
  }
  const unsigned none_votes = __ballot_sync(0xFFFFFFFFu, none);
  const unsigned made_votes = __ballot_sync(0xFFFFFFFFu, made);
  if (lane_index() != 0) return;
  if (missing_count != nullptr && none_votes != 0)
    atomicAdd(missing_count, static_cast<unsigned long long>(__popc(none_votes)));
  if (created != nullptr && made_votes != 0)
    atomicAdd(created, static_cast<unsigned long long>(__popc(made_votes)));
}

// counter += how many flags[i] == value (a warp's count added once).
__global__ void count_flags_kernel(size_t n, const bool* flags, bool value,
                                   unsigned long long* counter) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool hit = i < n && flags[i] == value;
  const unsigned votes = __ballot_sync(0xFFFFFFFFu, hit);
  if (lane_index() == 0 && votes != 0)
    atomicAdd(counter, static_cast<unsigned long long>(__popc(votes)));
}

}  // namespace

void gather_rows_cuda(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                      float* dst, uint32_t dst_stride, uint32_t width, StreamHandle stream) {
  if (n == 0) return;
  if (ops::cuda::vec4_ok(src, src_stride, width) && ops::cuda::vec4_ok(dst, dst_stride, width)) {
    move_rows_kernel<false, 4><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
        n, index, src, src_stride, dst, dst_stride, width);
  } else {
    move_rows_kernel<false, 1><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
        n, index, src, src_stride, dst, dst_stride, width);
  }
  core::cuda::check_launch("gather_rows");
}

void scatter_rows_cuda(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                       float* dst, uint32_t dst_stride, uint32_t width, StreamHandle stream) {
  if (n == 0) return;
  if (ops::cuda::vec4_ok(src, src_stride, width) && ops::cuda::vec4_ok(dst, dst_stride, width)) {
    move_rows_kernel<true, 4><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
        n, index, src, src_stride, dst, dst_stride, width);
  } else {
    move_rows_kernel<true, 1><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
        n, index, src, src_stride, dst, dst_stride, width);
  }
  core::cuda::check_launch("scatter_rows");
}

template <TableKey K>
void fill_initial_rows_cuda(size_t n, const K* keys, const bool* flags, bool when,
                            const InitializerOptions& init, float* rows, uint32_t stride,
                            uint32_t width, StreamHandle stream) {
  if (n == 0) return;
  fill_initial_kernel<K><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
      n, keys, flags, when, init, rows, stride, width);
  core::cuda::check_launch("fill_initial_rows");
}

template void fill_initial_rows_cuda<int64_t>(size_t, const int64_t*, const bool*, bool,
                                              const InitializerOptions&, float*, uint32_t, uint32_t,
                                              StreamHandle);
template void fill_initial_rows_cuda<uint64_t>(size_t, const uint64_t*, const bool*, bool,
                                               const InitializerOptions&, float*, uint32_t,
                                               uint32_t, StreamHandle);

size_t select_indices_cuda(size_t n, const bool* flags, bool value, uint32_t* out,
                           StreamHandle stream_handle) {
  if (n == 0) return 0;
  const cudaStream_t stream = as_stream(stream_handle);
  core::cuda::DeviceArray<uint32_t> count(1, stream);
  const thrust::counting_iterator<uint32_t> positions(0);
  size_t bytes = 0;
  core::cuda::check(cub::DeviceSelect::If(nullptr, bytes, positions, out, count.data(),
                                          static_cast<int>(n), FlagEquals{flags, value}, stream),
                    "select_indices: DeviceSelect::If (size)");
  core::cuda::DeviceArray<uint8_t> temp(bytes, stream);
  core::cuda::check(cub::DeviceSelect::If(temp.data(), bytes, positions, out, count.data(),
                                          static_cast<int>(n), FlagEquals{flags, value}, stream),
                    "select_indices: DeviceSelect::If");
  return core::cuda::read_value(count.data(), stream, "select_indices: count");
}

void fill_flags_cuda(size_t n, bool value, bool* flags, StreamHandle stream) {
  if (n == 0) return;
  fill_flags_kernel<<<blocks_for_threads(n), kBlock, 0, as_stream(stream)>>>(n, value, flags);
  core::cuda::check_launch("fill_flags");
}

void or_flags_cuda(size_t n, const bool* flags, bool when, bool* out, StreamHandle stream) {
  if (n == 0) return;
  or_flags_kernel<<<blocks_for_threads(n), kBlock, 0, as_stream(stream)>>>(n, flags, when, out);
  core::cuda::check_launch("or_flags");
}

size_t flag_nonfinite_rows_cuda(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                                bool* flags, StreamHandle stream_handle) {
  if (n == 0) return 0;
  const cudaStream_t stream = as_stream(stream_handle);
  core::cuda::DeviceArray<unsigned long long> count(1, stream);
  core::cuda::check(cudaMemsetAsync(count.data(), 0, sizeof(unsigned long long), stream),
                    "flag_nonfinite_rows: cudaMemsetAsync");
  nonfinite_kernel<<<blocks_for_warps(n), kBlock, 0, stream>>>(n, grads, stride, dim, flags,
                                                               count.data());
  core::cuda::check_launch("flag_nonfinite_rows");
  return core::cuda::read_value(count.data(), stream, "flag_nonfinite_rows: count");
}

void apply_optimizer_rows_cuda(const OptimizerOptions& o, size_t n, float* rows,
                               uint32_t row_stride, const float* grads, uint32_t grad_stride,
                               uint32_t dim, const bool* skip, StreamHandle stream) {
  if (n == 0) return;
  launch_optimizer_dense(o, n, rows, row_stride, grads, grad_stride, dim, skip, nullptr,
                         as_stream(stream));
}

void apply_optimizer_rows_guarded_cuda(const OptimizerOptions& o, size_t n, float* rows,
                                       uint32_t row_stride, const float* grads,
                                       uint32_t grad_stride, uint32_t dim, const bool* skip,
                                       uint64_t* nonfinite, StreamHandle stream) {
  if (n == 0) return;
  launch_optimizer_dense(o, n, rows, row_stride, grads, grad_stride, dim, skip,
                         reinterpret_cast<unsigned long long*>(nonfinite), as_stream(stream));
}

void apply_optimizer_row_ptrs_cuda(const OptimizerOptions& o, size_t n, float* const* rows,
                                   const float* grads, uint32_t grad_stride, uint32_t dim,
                                   const bool* skip, uint64_t* nonfinite, StreamHandle stream) {
  if (n == 0) return;
  launch_optimizer_any(o, n, AddressedRowsOut{rows}, dim % 4 == 0, grads, grad_stride, dim, skip,
                       reinterpret_cast<unsigned long long*>(nonfinite), as_stream(stream));
}

void resolve_missing_rows_cuda(size_t n, float** rows, bool* missing, float* fallback,
                               uint32_t fallback_stride, const bool* founds, uint64_t* created,
                               uint64_t* missing_count, StreamHandle stream) {
  if (n == 0) return;
  resolve_missing_kernel<<<blocks_for_threads(n), kBlock, 0, as_stream(stream)>>>(
      n, rows, missing, fallback, fallback_stride, founds,
      reinterpret_cast<unsigned long long*>(created),
      reinterpret_cast<unsigned long long*>(missing_count));
  core::cuda::check_launch("resolve_missing_rows");
}

void count_flags_cuda(size_t n, const bool* flags, bool value, uint64_t* counter,
                      StreamHandle stream) {
  if (n == 0) return;
  count_flags_kernel<<<blocks_for_threads(n), kBlock, 0, as_stream(stream)>>>(
      n, flags, value, reinterpret_cast<unsigned long long*>(counter));
  core::cuda::check_launch("count_flags");
}

void read_words_cuda(const uint64_t* words, size_t count, uint64_t* host, StreamHandle stream) {
  if (count == 0) return;
  const cudaStream_t s = as_stream(stream);
  core::cuda::check(
      cudaMemcpyAsync(host, words, count * sizeof(uint64_t), cudaMemcpyDeviceToHost, s),
      "read_words: cudaMemcpyAsync");
  core::cuda::sync(s, "read_words");
}

}  // namespace dynemb::ops::detail

// The row ops on the GPU.
#include <thrust/iterator/counting_iterator.h>
#include <cub/device/device_select.cuh>

#include <cmath>

#include "core/cuda/check.hpp"
#include "core/cuda/device_array.hpp"
#include "dynemb/core/initializer.hpp"
#include "ops/backends.hpp"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/optimizer_warp.cuh"

namespace dynemb::detail {
namespace {

using ops_cuda::as_stream;
using ops_cuda::blocks_for_threads;
using ops_cuda::blocks_for_warps;
using ops_cuda::kBlock;
using ops_cuda::lane_index;
using ops_cuda::warp_index;

template <bool kScatter>
__global__ void move_rows_kernel(size_t n, const uint32_t* index, const float* src,
                                 uint32_t src_stride, float* dst, uint32_t dst_stride,
                                 uint32_t width) {
  const size_t i = warp_index();
  if (i >= n) return;
  const size_t from = kScatter ? i : index[i];
  const size_t to = kScatter ? index[i] : i;
  for (uint32_t j = lane_index(); j < width; j += 32) {
    dst[to * dst_stride + j] = src[from * src_stride + j];
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
    rows[i * stride + j] = initial_value(init, bits, j);
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

// One warp per row (coalesced over the row's elements).
__global__ void optimizer_kernel(OptimizerOptions o, size_t n, float* rows, uint32_t row_stride,
                                 const float* grads, uint32_t grad_stride, uint32_t dim,
                                 const bool* skip) {
  const size_t i = warp_index();
  if (i >= n || (skip != nullptr && skip[i])) return;
  apply_optimizer_on(o, rows + i * row_stride, grads + i * grad_stride, dim,
                     ops_cuda::WarpLanes{lane_index()});
}

}  // namespace

void gather_rows_cuda(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                      float* dst, uint32_t dst_stride, uint32_t width, StreamHandle stream) {
  if (n == 0) return;
  move_rows_kernel<false><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
      n, index, src, src_stride, dst, dst_stride, width);
  cuda::check_launch("gather_rows");
}

void scatter_rows_cuda(size_t n, const uint32_t* index, const float* src, uint32_t src_stride,
                       float* dst, uint32_t dst_stride, uint32_t width, StreamHandle stream) {
  if (n == 0) return;
  move_rows_kernel<true><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
      n, index, src, src_stride, dst, dst_stride, width);
  cuda::check_launch("scatter_rows");
}

template <TableKey K>
void fill_initial_rows_cuda(size_t n, const K* keys, const bool* flags, bool when,
                            const InitializerOptions& init, float* rows, uint32_t stride,
                            uint32_t width, StreamHandle stream) {
  if (n == 0) return;
  fill_initial_kernel<K><<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
      n, keys, flags, when, init, rows, stride, width);
  cuda::check_launch("fill_initial_rows");
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
  cuda::DeviceArray<uint32_t> count(1, stream);
  const thrust::counting_iterator<uint32_t> positions(0);
  size_t bytes = 0;
  cuda::check(cub::DeviceSelect::If(nullptr, bytes, positions, out, count.data(),
                                    static_cast<int>(n), FlagEquals{flags, value}, stream),
              "select_indices: DeviceSelect::If (size)");
  cuda::DeviceArray<uint8_t> temp(bytes, stream);
  cuda::check(cub::DeviceSelect::If(temp.data(), bytes, positions, out, count.data(),
                                    static_cast<int>(n), FlagEquals{flags, value}, stream),
              "select_indices: DeviceSelect::If");
  return cuda::read_value(count.data(), stream, "select_indices: count");
}

void fill_flags_cuda(size_t n, bool value, bool* flags, StreamHandle stream) {
  if (n == 0) return;
  fill_flags_kernel<<<blocks_for_threads(n), kBlock, 0, as_stream(stream)>>>(n, value, flags);
  cuda::check_launch("fill_flags");
}

void or_flags_cuda(size_t n, const bool* flags, bool when, bool* out, StreamHandle stream) {
  if (n == 0) return;
  or_flags_kernel<<<blocks_for_threads(n), kBlock, 0, as_stream(stream)>>>(n, flags, when, out);
  cuda::check_launch("or_flags");
}

size_t flag_nonfinite_rows_cuda(size_t n, const float* grads, uint32_t stride, uint32_t dim,
                                bool* flags, StreamHandle stream_handle) {
  if (n == 0) return 0;
  const cudaStream_t stream = as_stream(stream_handle);
  cuda::DeviceArray<unsigned long long> count(1, stream);
  cuda::check(cudaMemsetAsync(count.data(), 0, sizeof(unsigned long long), stream),
              "flag_nonfinite_rows: cudaMemsetAsync");
  nonfinite_kernel<<<blocks_for_warps(n), kBlock, 0, stream>>>(n, grads, stride, dim, flags,
                                                               count.data());
  cuda::check_launch("flag_nonfinite_rows");
  return cuda::read_value(count.data(), stream, "flag_nonfinite_rows: count");
}

void apply_optimizer_rows_cuda(const OptimizerOptions& o, size_t n, float* rows,
                               uint32_t row_stride, const float* grads, uint32_t grad_stride,
                               uint32_t dim, const bool* skip, StreamHandle stream) {
  if (n == 0) return;
  optimizer_kernel<<<blocks_for_warps(n), kBlock, 0, as_stream(stream)>>>(
      o, n, rows, row_stride, grads, grad_stride, dim, skip);
  cuda::check_launch("apply_optimizer_rows");
}

}  // namespace dynemb::detail

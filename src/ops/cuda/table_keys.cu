// The collection's combined batch on the GPU (include/dynemb/ops/table_keys.hpp).
#include <thrust/binary_search.h>
#include <thrust/execution_policy.h>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/ops/table_keys.hpp"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::as_stream;
using ops::cuda::blocks_for_threads;
using ops::cuda::kBlock;

// Thread i < n writes combined key i; thread b <= num_bags writes combined offset b and checks
// the ends. Each warp ORs its keys' bits before one atomic.
template <TableKey K>
__global__ void combine_kernel(uint32_t table, uint64_t tag, size_t n, const K* keys,
                               const int64_t* offsets, size_t num_bags, uint64_t base,
                               uint64_t bag_base, uint64_t* combined_keys,
                               int64_t* combined_offsets, unsigned long long* status) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t seen = 0;
  if (i < n) {
    const uint64_t bits = key_bits(keys[i]);
    seen = bits;
    combined_keys[base + i] = bits | tag;
  }
  if (i <= num_bags) {
    const int64_t o = offsets[i];
    combined_offsets[bag_base + i] = o + static_cast<int64_t>(base);
    const bool bad = (i == 0 && o != 0) || (i == num_bags && o != static_cast<int64_t>(n));
    if (bad) atomicMax(status + kBadTableFlag, ~0ull - table);
  }
  for (int offset = 16; offset > 0; offset /= 2) seen |= __shfl_xor_sync(0xFFFFFFFFu, seen, offset);
  if (ops::cuda::lane_index() == 0 && seen != 0) atomicOr(status + kKeyBitsSeen, seen);
}

template <TableKey K>
__global__ void split_kernel(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                             uint32_t shift, K* keys, uint64_t* bounds) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < u) keys[i] = static_cast<K>(unique_keys[i] & id_mask(shift));
  if (i <= num_tables) {
    bounds[i] = i == num_tables ? u
                                : thrust::lower_bound(thrust::seq, unique_keys, unique_keys + u,
                                                      table_tag(i, shift)) -
                                      unique_keys;
  }
}

}  // namespace

template <TableKey K>
void combine_table_keys_cuda(uint32_t table, uint32_t shift, size_t n, const K* keys,
                             const int64_t* offsets, size_t num_bags, uint64_t base,
                             uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                             uint64_t* status, StreamHandle stream) {
  const size_t threads = n > num_bags + 1 ? n : num_bags + 1;
  combine_kernel<K><<<blocks_for_threads(threads), kBlock, 0, as_stream(stream)>>>(
      table, table_tag(table, shift), n, keys, offsets, num_bags, base, bag_base, combined_keys,
      combined_offsets, reinterpret_cast<unsigned long long*>(status));
  core::cuda::check_launch("combine_table_keys");
}

template <TableKey K>
void split_table_keys_cuda(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                           uint32_t shift, K* keys, uint64_t* bounds, StreamHandle stream) {
  const size_t threads = u > size_t{num_tables} + 1 ? u : size_t{num_tables} + 1;
  split_kernel<K><<<blocks_for_threads(threads), kBlock, 0, as_stream(stream)>>>(
      u, unique_keys, num_tables, shift, keys, bounds);
  core::cuda::check_launch("split_table_keys");
}

template void combine_table_keys_cuda<int64_t>(uint32_t, uint32_t, size_t, const int64_t*,
                                               const int64_t*, size_t, uint64_t, uint64_t,
                                               uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void combine_table_keys_cuda<uint64_t>(uint32_t, uint32_t, size_t, const uint64_t*,
                                                const int64_t*, size_t, uint64_t, uint64_t,
                                                uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void split_table_keys_cuda<int64_t>(size_t, const uint64_t*, uint32_t, uint32_t, int64_t*,
                                             uint64_t*, StreamHandle);
template void split_table_keys_cuda<uint64_t>(size_t, const uint64_t*, uint32_t, uint32_t,
                                              uint64_t*, uint64_t*, StreamHandle);

}  // namespace dynemb::ops::detail

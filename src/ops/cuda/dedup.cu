// dedup on the GPU: radix sort (key, position), mark run heads, scan them into ranks.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "core/cuda/check.hpp"
#include "core/cuda/device_array.hpp"
#include "ops/backends.hpp"
#include "ops/cuda/launch.cuh"

namespace dynemb::detail {
namespace {

using ops_cuda::as_stream;
using ops_cuda::blocks_for_threads;
using ops_cuda::kBlock;

template <class K>
__global__ void head_flags_kernel(const K* sorted, size_t n, uint32_t* heads) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) heads[i] = (i == 0 || sorted[i] != sorted[i - 1]) ? 1u : 0u;
}

// rank[i] is the inclusive count of heads: the unique position of sorted[i] is rank[i] - 1.
template <class K>
__global__ void scatter_kernel(const K* sorted, const uint32_t* positions, const uint32_t* rank,
                               size_t n, K* unique_keys, uint32_t* inverse, uint32_t* starts) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t r = rank[i] - 1;
  inverse[positions[i]] = r;
  if (i == 0 || sorted[i] != sorted[i - 1]) {
    unique_keys[r] = sorted[i];
    starts[r] = static_cast<uint32_t>(i);
  }
}

__global__ void counts_kernel(const uint32_t* starts, size_t u, size_t n, uint32_t* counts) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < u) counts[r] = (r + 1 < u ? starts[r + 1] : static_cast<uint32_t>(n)) - starts[r];
}

}  // namespace

template <TableKey K>
size_t dedup_cuda(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts,
                  StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  cuda::DeviceArray<K> sorted(n, stream);
  cuda::DeviceArray<uint32_t> positions_in(n, stream), positions(n, stream), rank(n, stream);
  ops_cuda::fill_iota(positions_in.data(), n, stream);
  size_t sort_bytes = 0, scan_bytes = 0;
  const int num_items = static_cast<int>(n);
  cuda::check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, sorted.data(),
                                              positions_in.data(), positions.data(), num_items, 0,
                                              static_cast<int>(sizeof(K) * 8), stream),
              "dedup: SortPairs (size)");
  cuda::check(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, rank.data(), rank.data(),
                                            num_items, stream),
              "dedup: InclusiveSum (size)");
  cuda::DeviceArray<uint8_t> temp(std::max(sort_bytes, scan_bytes), stream);
  cuda::check(cub::DeviceRadixSort::SortPairs(temp.data(), sort_bytes, keys, sorted.data(),
                                              positions_in.data(), positions.data(), num_items, 0,
                                              static_cast<int>(sizeof(K) * 8), stream),
              "dedup: SortPairs");
  head_flags_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(sorted.data(), n, rank.data());
  cuda::check_launch("dedup: head_flags_kernel");
  cuda::check(cub::DeviceScan::InclusiveSum(temp.data(), scan_bytes, rank.data(), rank.data(),
                                            num_items, stream),
              "dedup: InclusiveSum");
  cuda::DeviceArray<uint32_t> starts(n, stream);
  scatter_kernel<<<blocks_for_threads(n), kBlock, 0, stream>>>(
      sorted.data(), positions.data(), rank.data(), n, unique_keys, inverse, starts.data());
  cuda::check_launch("dedup: scatter_kernel");
  const size_t u = cuda::read_value(rank.data() + n - 1, stream, "dedup: unique count");
  if (counts != nullptr) {
    counts_kernel<<<blocks_for_threads(u), kBlock, 0, stream>>>(starts.data(), u, n, counts);
    cuda::check_launch("dedup: counts_kernel");
  }
  return u;
}

template size_t dedup_cuda<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                                    StreamHandle);
template size_t dedup_cuda<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*, uint32_t*,
                                     StreamHandle);

}  // namespace dynemb::detail

// Ordering a batch by bucket: one kernel computes each key's bucket, CUB's stable radix sort
// orders (bucket, position) pairs over the bucket index's bits only.
#include "cuda/bucket_order.hpp"

#include <cub/device/device_radix_sort.cuh>

#include <bit>

#include "cuda/probe.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/hash.hpp"

namespace dynemb::table::cuda {
namespace {

__global__ void bucket_of_keys_kernel(const uint64_t* keys, const uint32_t* subset, uint64_t n,
                                      uint64_t num_buckets, uint32_t* buckets,
                                      uint32_t* positions) {
  const uint64_t k = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n) return;
  const uint32_t i = subset != nullptr ? subset[k] : static_cast<uint32_t>(k);
  buckets[k] = static_cast<uint32_t>(bucket_of_hash(hash_key_bits(keys[i]), num_buckets));
  positions[k] = i;
}

__global__ void gather_keys_kernel(const uint64_t* keys, const uint32_t* positions, uint64_t n,
                                   uint64_t* out) {
  const uint64_t k = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < n) out[k] = keys[positions[k]];
}

// Sorts the (bucket, position) pairs of keys[subset[k]] into `buckets` and `positions`.
void sort_by_bucket(const TableView& t, const uint64_t* keys, const uint32_t* subset, uint64_t n,
                    uint32_t* buckets, uint32_t* positions, cudaStream_t stream) {
  core::cuda::DeviceArray<uint32_t> buckets_in(n, stream), positions_in(n, stream);
  bucket_of_keys_kernel<<<blocks_for_threads(n, 1ull << 31), 256, 0, stream>>>(
      keys, subset, n, t.num_buckets, buckets_in.data(), positions_in.data());
  core::cuda::check(cudaGetLastError(), "bucket_of_keys_kernel launch");
  const int end_bit = t.num_buckets <= 1 ? 1 : std::bit_width(t.num_buckets - 1);
  const int items = static_cast<int>(n);
  size_t temp_bytes = 0;
  core::cuda::check(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, buckets_in.data(), buckets,
                                      positions_in.data(), positions, items, 0, end_bit, stream),
      "cub::DeviceRadixSort::SortPairs (size)");
  core::cuda::DeviceArray<uint8_t> temp(temp_bytes, stream);
  core::cuda::check(
      cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, buckets_in.data(), buckets,
                                      positions_in.data(), positions, items, 0, end_bit, stream),
      "cub::DeviceRadixSort::SortPairs");
}

}  // namespace

BucketOrder group_by_bucket(const TableView& t, const uint64_t* keys, const uint32_t* subset,
                            uint64_t n, cudaStream_t stream) {
  BucketOrder out{core::cuda::DeviceArray<uint32_t>(n, stream),
                  core::cuda::DeviceArray<uint32_t>(n, stream),
                  core::cuda::DeviceArray<uint64_t>(n, stream)};
  sort_by_bucket(t, keys, subset, n, out.buckets.data(), out.positions.data(), stream);
  // The write kernel reads each entry's key next to its bucket, not through its position.
  gather_keys_kernel<<<blocks_for_threads(n, 1ull << 31), 256, 0, stream>>>(
      keys, out.positions.data(), n, out.keys.data());
  core::cuda::check(cudaGetLastError(), "gather_keys_kernel launch");
  return out;
}

core::cuda::DeviceArray<uint32_t> positions_by_bucket(const TableView& t, const uint64_t* keys,
                                                      const uint32_t* subset, uint64_t n,
                                                      cudaStream_t stream) {
  core::cuda::DeviceArray<uint32_t> buckets(n, stream), positions(n, stream);
  sort_by_bucket(t, keys, subset, n, buckets.data(), positions.data(), stream);
  return positions;
}

}  // namespace dynemb::table::cuda

// Key routing of the sharded collection on the GPU: owners by a kernel, the send order by a
// stable radix sort of (owner, table) buckets, the owner's regrouping by a segment search.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/hash.hpp"
#include "route_keys.hpp"

namespace dynemb::dist::detail {
namespace {

constexpr int kBlock = 256;

unsigned blocks(size_t n) {
  return static_cast<unsigned>((n + kBlock - 1) / kBlock);
}

cudaStream_t as_cuda(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

// Device scratch freed on the stream when it goes out of scope.
template <class T>
class StreamBuffer {
 public:
  StreamBuffer(size_t count, cudaStream_t stream) : stream_(stream) {
    core::cuda::check(cudaMallocAsync(reinterpret_cast<void**>(&ptr_),
                                      std::max<size_t>(count, 1) * sizeof(T), stream),
                      "route keys: cudaMallocAsync");
  }
  ~StreamBuffer() { cudaFreeAsync(ptr_, stream_); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  cudaStream_t stream_;
};

// The last i with starts[i] <= x (starts ascending, starts[0] = 0).
__device__ uint32_t segment_of(const uint64_t* starts, uint32_t segments, uint64_t x) {
  uint32_t lo = 0, hi = segments;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (starts[mid] <= x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <class K>
__global__ void bucket_by_owner(const K* keys, size_t n, const uint64_t* base, uint32_t tables,
                                uint32_t world, DeviceRule rule, uint32_t* bucket,
                                uint32_t* position, unsigned long long* counts) {
  const size_t u = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (u >= n) return;
  // Empty tables repeat a base: the last table starting at or before u is u's.
  const uint32_t t = segment_of(base, tables, u);
  const uint64_t bits = static_cast<uint64_t>(keys[u]);
  const uint32_t owner = rule == DeviceRule::kHash ? rank_of_key_bits(bits, world)
                                                   : static_cast<uint32_t>(bits % world);
  const uint32_t b = owner * tables + t;
  bucket[u] = b;
  position[u] = static_cast<uint32_t>(u);
  atomicAdd(counts + b, 1ull);
}

template <class K>
__global__ void gather_keys(const K* keys, const uint32_t* index, size_t n, K* out) {
  const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (p < n) out[p] = keys[index[p]];
}

template <class K>
__global__ void regroup(const K* recv, size_t n, const uint64_t* src_start,
                        const uint64_t* dst_start, uint32_t segments, K* owner_keys,
                        uint32_t* owner_index) {
  const size_t q = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (q >= n) return;
  const uint32_t s = segment_of(src_start, segments, q);
  const uint64_t j = dst_start[s] + (q - src_start[s]);
  owner_keys[j] = recv[q];
  owner_index[j] = static_cast<uint32_t>(q);
}

int bits_for(uint32_t values) {
  int bits = 1;
  while ((uint64_t{1} << bits) < values) ++bits;
  return bits;
}

}  // namespace

template <class K>
void route_unique_keys(const K* unique_keys, const std::vector<size_t>& base, uint32_t world,
                       DeviceRule rule, uint32_t* send_index, K* send_keys,
                       std::vector<uint64_t>& counts, StreamHandle stream_handle) {
  const cudaStream_t stream = as_cuda(stream_handle);
  const uint32_t tables = static_cast<uint32_t>(base.size() - 1);
  const size_t n = base.back();
  const uint32_t buckets = world * tables;
  counts.assign(buckets, 0);
  if (n == 0) return;
  std::vector<uint64_t> base64(base.begin(), base.end());
  StreamBuffer<uint64_t> d_base(base64.size(), stream);
  StreamBuffer<unsigned long long> d_counts(buckets, stream);
  StreamBuffer<uint32_t> bucket(n, stream), sorted_bucket(n, stream), position(n, stream);
  core::cuda::check(cudaMemcpyAsync(d_base.get(), base64.data(), base64.size() * sizeof(uint64_t),
                                    cudaMemcpyHostToDevice, stream),
                    "route keys: copy the table bases");
  core::cuda::check(
      cudaMemsetAsync(d_counts.get(), 0, buckets * sizeof(unsigned long long), stream),
      "route keys: clear the counts");
  bucket_by_owner<<<blocks(n), kBlock, 0, stream>>>(unique_keys, n, d_base.get(), tables, world,
                                                    rule, bucket.get(), position.get(),
                                                    d_counts.get());
  core::cuda::check(cudaGetLastError(), "route keys: bucket_by_owner");
  const int end_bit = bits_for(buckets);
  size_t temp_bytes = 0;
  core::cuda::check(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, bucket.get(), sorted_bucket.get(),
                                      position.get(), send_index, n, 0, end_bit, stream),
      "route keys: sort size");
  {
    StreamBuffer<unsigned char> temp(temp_bytes, stream);
    core::cuda::check(
        cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, bucket.get(), sorted_bucket.get(),
                                        position.get(), send_index, n, 0, end_bit, stream),
        "route keys: sort by (owner, table)");
  }
  gather_keys<<<blocks(n), kBlock, 0, stream>>>(unique_keys, send_index, n, send_keys);
  core::cuda::check(cudaGetLastError(), "route keys: gather_keys");
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  core::cuda::check(cudaMemcpyAsync(counts.data(), d_counts.get(), buckets * sizeof(uint64_t),
                                    cudaMemcpyDeviceToHost, stream),
                    "route keys: copy the counts");
  core::cuda::check(cudaStreamSynchronize(stream), "route keys: synchronize");
}

template <class K>
void regroup_received_keys(const K* recv_keys, size_t received,
                           const std::vector<uint64_t>& src_start,
                           const std::vector<uint64_t>& dst_start, K* owner_keys,
                           uint32_t* owner_index, StreamHandle stream_handle) {
  if (received == 0) return;
  const cudaStream_t stream = as_cuda(stream_handle);
  const uint32_t segments = static_cast<uint32_t>(dst_start.size());
  std::vector<uint64_t> both(src_start.begin(), src_start.end());
  both.insert(both.end(), dst_start.begin(), dst_start.end());
  StreamBuffer<uint64_t> d_both(both.size(), stream);
  core::cuda::check(cudaMemcpyAsync(d_both.get(), both.data(), both.size() * sizeof(uint64_t),
                                    cudaMemcpyHostToDevice, stream),
                    "regroup keys: copy the segments");
  regroup<<<blocks(received), kBlock, 0, stream>>>(recv_keys, received, d_both.get(),
                                                   d_both.get() + src_start.size(), segments,
                                                   owner_keys, owner_index);
  core::cuda::check(cudaGetLastError(), "regroup keys: regroup");
  // No synchronization: a copy from pageable host memory returns once the bytes are staged,
  // so `both` may go.
}

template void route_unique_keys<int64_t>(const int64_t*, const std::vector<size_t>&, uint32_t,
                                         DeviceRule, uint32_t*, int64_t*, std::vector<uint64_t>&,
                                         StreamHandle);
template void route_unique_keys<uint64_t>(const uint64_t*, const std::vector<size_t>&, uint32_t,
                                          DeviceRule, uint32_t*, uint64_t*, std::vector<uint64_t>&,
                                          StreamHandle);
template void regroup_received_keys<int64_t>(const int64_t*, size_t, const std::vector<uint64_t>&,
                                             const std::vector<uint64_t>&, int64_t*, uint32_t*,
                                             StreamHandle);
template void regroup_received_keys<uint64_t>(const uint64_t*, size_t, const std::vector<uint64_t>&,
                                              const std::vector<uint64_t>&, uint64_t*, uint32_t*,
                                              StreamHandle);

}  // namespace dynemb::dist::detail

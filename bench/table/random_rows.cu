#include "bench/table/random_rows.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "dynemb/core/error.hpp"

namespace dynemb::bench {
namespace {

constexpr uint32_t kTile = 8;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("dynemb bench table (random rows): ") + what + ": " +
                    cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
  }
}

// Row r of `to` (at to_index[r]) = row r of `from` (at from_index[r]), kTile threads per row;
// T is float4 or float, `width` Ts per row.
template <class T>
__global__ void move_rows(const T* __restrict__ from, const uint64_t* __restrict__ from_index,
                          T* __restrict__ to, const uint64_t* __restrict__ to_index, uint64_t n,
                          uint32_t width) {
  const uint64_t tiles = static_cast<uint64_t>(gridDim.x) * blockDim.x / kTile;
  const uint32_t lane = threadIdx.x % kTile;
  for (uint64_t r = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kTile; r < n;
       r += tiles) {
    const T* src = from + (from_index != nullptr ? from_index[r] : r) * width;
    T* dst = to + (to_index != nullptr ? to_index[r] : r) * width;
    for (uint32_t j = lane; j < width; j += kTile) dst[j] = src[j];
  }
}

// Owns the buffers of one measurement.
struct Buffers {
  void* host = nullptr;
  void* dev = nullptr;
  uint64_t* index = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  ~Buffers() {
    if (host != nullptr) cudaFreeHost(host);
    if (dev != nullptr) cudaFree(dev);
    if (index != nullptr) cudaFree(index);
    if (begin != nullptr) cudaEventDestroy(begin);
    if (end != nullptr) cudaEventDestroy(end);
  }
};

template <class T>
double best_seconds(const T* from, const uint64_t* from_index, T* to, const uint64_t* to_index,
                    uint64_t n, uint32_t width, Buffers& b) {
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attribute");
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first is a warm-up
    check(cudaEventRecord(b.begin), "cudaEventRecord");
    move_rows<T><<<sms * 8, 256>>>(from, from_index, to, to_index, n, width);
    check(cudaGetLastError(), "move_rows launch");
    check(cudaEventRecord(b.end), "cudaEventRecord");
    check(cudaEventSynchronize(b.end), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, b.begin, b.end), "cudaEventElapsedTime");
    if (rep > 0) best = std::min(best, static_cast<double>(ms) * 1e-3);
  }
  return best;
}

}  // namespace

RandomRowRate measure_random_rows(uint32_t dim, size_t region_bytes) {
  constexpr uint64_t kRows = uint64_t{1} << 20;
  const size_t row_bytes = size_t{4} * dim;
  const uint64_t host_rows = region_bytes / row_bytes;
  if (host_rows == 0) return {};
  Buffers b;
  check(cudaHostAlloc(&b.host, host_rows * row_bytes, cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc (the table's host-resident bytes)");
  check(cudaMalloc(&b.dev, kRows * row_bytes), "cudaMalloc");
  check(cudaMalloc(&b.index, kRows * sizeof(uint64_t)), "cudaMalloc");
  check(cudaEventCreate(&b.begin), "cudaEventCreate");
  check(cudaEventCreate(&b.end), "cudaEventCreate");
  // Uniform rows (a few repeat; a scatter then writes the same bytes twice).
  std::vector<uint64_t> index(kRows);
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<uint64_t> pick(0, host_rows - 1);
  for (uint64_t& v : index) v = pick(rng);
  check(cudaMemcpy(b.index, index.data(), kRows * sizeof(uint64_t), cudaMemcpyHostToDevice),
        "cudaMemcpy (index)");
  void* mapped = nullptr;
  check(cudaHostGetDevicePointer(&mapped, b.host, 0), "cudaHostGetDevicePointer");
  const double bytes = static_cast<double>(kRows) * static_cast<double>(row_bytes);
  RandomRowRate rate;
  if (dim % 4 == 0) {
    auto* host = static_cast<float4*>(mapped);
    auto* dev = static_cast<float4*>(b.dev);
    rate.read = bytes / best_seconds<float4>(host, b.index, dev, nullptr, kRows, dim / 4, b);
    rate.write = bytes / best_seconds<float4>(dev, nullptr, host, b.index, kRows, dim / 4, b);
  } else {
    auto* host = static_cast<float*>(mapped);
    auto* dev = static_cast<float*>(b.dev);
    rate.read = bytes / best_seconds<float>(host, b.index, dev, nullptr, kRows, dim, b);
    rate.write = bytes / best_seconds<float>(dev, nullptr, host, b.index, kRows, dim, b);
  }
  return rate;
}

}  // namespace dynemb::bench

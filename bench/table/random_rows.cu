#include "bench/table/random_rows.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "dynemb/core/error.hpp"

namespace dynemb::bench {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("dynemb bench (random rows): ") + what + ": " +
                    cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
  }
}

// Row r of `to` (at to_index[r]) = row r of `from` (at from_index[r]), kTile threads per row, one
// tile per row (the grid covers every row, so blocks start in list order and the rows in flight
// stay close together in the list); T is float4, float2 or float, `width` Ts per row.
template <uint32_t kTile, class T>
__global__ void move_rows(const T* __restrict__ from, const uint64_t* __restrict__ from_index,
                          T* __restrict__ to, const uint64_t* __restrict__ to_index, uint64_t n,
                          uint32_t width) {
  const uint64_t r = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kTile;
  if (r >= n) return;
  const T* src = from + (from_index != nullptr ? from_index[r] : r) * width;
  T* dst = to + (to_index != nullptr ? to_index[r] : r) * width;
  for (uint32_t j = threadIdx.x % kTile; j < width; j += kTile) dst[j] = src[j];
}

// Owns the buffers of one measurement.
struct Buffers {
  void* host = nullptr;
  void* dev = nullptr;
  uint64_t* index = nullptr;
  uint64_t* other_index = nullptr;
  ~Buffers() {
    if (host != nullptr) cudaFreeHost(host);
    if (dev != nullptr) cudaFree(dev);
    if (index != nullptr) cudaFree(index);
    if (other_index != nullptr) cudaFree(other_index);
  }
};

// Two events, destroyed with it.
struct Events {
  cudaEvent_t begin = nullptr, end = nullptr;
  Events() {
    check(cudaEventCreate(&begin), "cudaEventCreate");
    check(cudaEventCreate(&end), "cudaEventCreate");
  }
  ~Events() {
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
  }
};

template <uint32_t kTile, class T>
double best_seconds(const T* from, const uint64_t* from_index, T* to, const uint64_t* to_index,
                    uint64_t n, uint32_t width) {
  constexpr uint32_t kThreads = 256;
  const uint64_t blocks = (n * kTile + kThreads - 1) / kThreads;
  Events e;
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first is a warm-up
    check(cudaEventRecord(e.begin), "cudaEventRecord");
    move_rows<kTile, T>
        <<<static_cast<unsigned>(blocks), kThreads>>>(from, from_index, to, to_index, n, width);
    check(cudaGetLastError(), "move_rows launch");
    check(cudaEventRecord(e.end), "cudaEventRecord");
    check(cudaEventSynchronize(e.end), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, e.begin, e.end), "cudaEventElapsedTime");
    if (rep > 0) best = std::min(best, static_cast<double>(ms) * 1e-3);
  }
  return best;
}

// The widest access (16, 8 or 4 bytes) that divides the row and still gives each of the kTile
// threads a word: a warp reads a row of 256 bytes as 8-byte words.
template <uint32_t kTile>
double best_seconds_for(const void* from, const uint64_t* from_index, void* to,
                        const uint64_t* to_index, uint64_t n, uint32_t row_bytes) {
  if (row_bytes % 16 == 0 && row_bytes / 16 >= kTile) {
    return best_seconds<kTile>(static_cast<const float4*>(from), from_index,
                               static_cast<float4*>(to), to_index, n, row_bytes / 16);
  }
  if (row_bytes % 8 == 0) {
    return best_seconds<kTile>(static_cast<const float2*>(from), from_index,
                               static_cast<float2*>(to), to_index, n, row_bytes / 8);
  }
  return best_seconds<kTile>(static_cast<const float*>(from), from_index, static_cast<float*>(to),
                             to_index, n, row_bytes / 4);
}

}  // namespace

double time_row_moves(const void* from, const uint64_t* from_index, void* to,
                      const uint64_t* to_index, uint64_t n, uint32_t row_bytes,
                      uint32_t threads_per_row) {
  switch (threads_per_row) {
    case 8:
      return best_seconds_for<8>(from, from_index, to, to_index, n, row_bytes);
    case 16:
      return best_seconds_for<16>(from, from_index, to, to_index, n, row_bytes);
    case 32:
      return best_seconds_for<32>(from, from_index, to, to_index, n, row_bytes);
  }
  throw InvalidArgument("time_row_moves: threads_per_row = " + std::to_string(threads_per_row) +
                        ": must be 8, 16 or 32");
}

RandomRowRate measure_random_rows(uint32_t dim, size_t region_bytes) {
  constexpr uint64_t kRows = uint64_t{1} << 19;
  constexpr uint32_t kThreadsPerRow = 32;  // the fastest measured (dynemb_bench_host_rows)
  const uint32_t row_bytes = 4 * dim;
  const uint64_t host_rows = region_bytes / row_bytes;
  if (host_rows == 0) return {};
  Buffers b;
  check(cudaHostAlloc(&b.host, host_rows * row_bytes, cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc (the table's host-resident bytes)");
  check(cudaMalloc(&b.dev, kRows * row_bytes), "cudaMalloc");
  check(cudaMalloc(&b.index, kRows * sizeof(uint64_t)), "cudaMalloc");
  check(cudaMalloc(&b.other_index, kRows * sizeof(uint64_t)), "cudaMalloc");
  // Uniform rows (a few repeat; a scatter then writes the same bytes twice), visited in ascending
  // address order as the table visits a large call's rows (its keys in bucket order).
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<uint64_t> pick(0, host_rows - 1);
  std::vector<uint64_t> index(kRows);
  for (uint64_t* to : {b.index, b.other_index}) {
    for (uint64_t& v : index) v = pick(rng);
    std::sort(index.begin(), index.end());
    check(cudaMemcpy(to, index.data(), kRows * sizeof(uint64_t), cudaMemcpyHostToDevice),
          "cudaMemcpy (index)");
  }
  void* mapped = nullptr;
  check(cudaHostGetDevicePointer(&mapped, b.host, 0), "cudaHostGetDevicePointer");
  const double bytes = static_cast<double>(kRows) * row_bytes;
  RandomRowRate rate;
  rate.read =
      bytes / time_row_moves(mapped, b.index, b.dev, nullptr, kRows, row_bytes, kThreadsPerRow);
  rate.write =
      bytes / time_row_moves(b.dev, nullptr, mapped, b.index, kRows, row_bytes, kThreadsPerRow);
  rate.both =
      2.0 * bytes /
      time_row_moves(mapped, b.index, mapped, b.other_index, kRows, row_bytes, kThreadsPerRow);
  return rate;
}

}  // namespace dynemb::bench

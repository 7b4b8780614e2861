// L2 and DRAM read bandwidth on this GPU for the access shapes of the training step: random
// 512-byte rows (one warp a row, one float4 a lane) and a sequential float4 stream, over buffers
// that fit in L2 (8-32 MB) and one that does not (4 GB).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Each warp reads `iters` random rows of 512 B (rows a power of two).
__global__ void random_rows(const float4* __restrict__ buf, uint32_t row_mask, int iters,
                            float* sink) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const uint32_t lane = threadIdx.x & 31;
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll 4
  for (int i = 0; i < iters; ++i) {
    const uint32_t row = mix(warp * 0x9e3779b9U + i) & row_mask;
    const float4 v = __ldg(buf + size_t(row) * 32 + lane);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  if (acc.x + acc.y + acc.z + acc.w == 12345.f) sink[0] = acc.x;
}

// Grid-stride float4 reads over the buffer, `passes` times.
__global__ void sequential(const float4* __restrict__ buf, size_t n4, int passes, float* sink) {
  float4 acc = make_float4(0, 0, 0, 0);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (int p = 0; p < passes; ++p)
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n4; i += stride) {
      const float4 v = __ldg(buf + i);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
  if (acc.x + acc.y + acc.z + acc.w == 12345.f) sink[0] = acc.x;
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("{\"gpu\": \"%s\", \"l2_bytes\": %d, \"sms\": %d, \"results\": [\n", prop.name,
              prop.l2CacheSize, prop.multiProcessorCount);
  float* sink;
  cudaMalloc(&sink, 4);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const size_t sizes[] = {8ull << 20, 16ull << 20, 24ull << 20, 32ull << 20, 4ull << 30};
  bool first = true;
  for (size_t bytes : sizes) {
    float4* buf;
    cudaMalloc(&buf, bytes);
    cudaMemset(buf, 0, bytes);
    const uint32_t rows = uint32_t(bytes / 512);
    const int threads = 256, blocks = prop.multiProcessorCount * 8;
    const int iters = 4096;
    for (int kind = 0; kind < 2; ++kind) {
      float best = 1e30f;
      double moved = 0;
      for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(a);
        if (kind == 0) {
          random_rows<<<blocks, threads>>>(buf, rows - 1, iters, sink);
          moved = double(blocks) * threads / 32 * iters * 512;
        } else {
          const int passes = bytes >= (1ull << 30) ? 2 : int((16ull << 30) / bytes);
          sequential<<<blocks, threads>>>(buf, bytes / 16, passes, sink);
          moved = double(bytes) * passes;
        }
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (rep > 0 && ms < best) best = ms;
      }
      std::printf(
          "%s  {\"buffer_mb\": %zu, \"access\": \"%s\", \"gb_moved\": %.2f, \"ms\": %.3f, "
          "\"tb_s\": %.2f}",
          first ? "" : ",\n", bytes >> 20, kind == 0 ? "random 512 B rows" : "sequential",
          moved / 1e9, best, moved / 1e9 / best);
      first = false;
    }
    cudaFree(buf);
  }
  std::printf("\n], \"error\": \"%s\"}\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}

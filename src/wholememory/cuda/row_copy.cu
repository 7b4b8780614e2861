// Row copies on the GPU: a group of lanes per row (a warp for long rows, 4 to 16 lanes for short
// ones), in the widest word every address and size allows.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <numeric>

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#include "dynemb/core/cuda/device_info.hpp"
#include "dynemb/core/error.hpp"
#include "row_copy.hpp"

namespace dynemb::wholememory {
namespace {

constexpr uint32_t kWarp = 32;
constexpr uint32_t kBlock = 256;

// The parts, passed by value to the kernel.
struct PartTable {
  char* parts[kMaxCudaParts];
};

// A group of kLanes threads per row (a power of two up to a warp: rows of few words share a
// warp, so every lane moves a word), each lane its words lane, lane + kLanes, ...
template <class Word, bool kGather, uint32_t kLanes>
__global__ void copy_rows_kernel(PartTable table, uint64_t rows_per_part, uint64_t entry_bytes,
                                 uint64_t offset_bytes, uint64_t words, const int64_t* index,
                                 size_t n, char* buffer, uint64_t buffer_stride) {
  const size_t groups = static_cast<size_t>(gridDim.x) * (blockDim.x / kLanes);
  const uint32_t lane = threadIdx.x % kLanes;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes; i < n;
       i += groups) {
    const uint64_t row = static_cast<uint64_t>(index[i]);
    const uint64_t part = row / rows_per_part;
    Word* space = reinterpret_cast<Word*>(
        table.parts[part] + (row - part * rows_per_part) * entry_bytes + offset_bytes);
    Word* dense = reinterpret_cast<Word*>(buffer + i * buffer_stride);
    for (uint64_t w = lane; w < words; w += kLanes) {
      if constexpr (kGather) {
        dense[w] = space[w];
      } else {
        space[w] = dense[w];
      }
    }
  }
}

__global__ void count_bad_kernel(const int64_t* index, size_t n, uint64_t rows,
                                 unsigned long long* bad) {
  unsigned long long mine = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    mine += (index[i] < 0 || static_cast<uint64_t>(index[i]) >= rows) ? 1 : 0;
  }
  if (mine != 0) atomicAdd(bad, mine);
}

uint32_t blocks_for(size_t items_per_block_unit, size_t n, int device);

template <class Word, bool kGather, uint32_t kLanes>
void launch_lanes(const PartTable& table, const RowSpace& s, uint64_t words, const int64_t* index,
                  size_t n, char* buffer, uint64_t stride, int device, cudaStream_t stream) {
  const uint32_t blocks = blocks_for(kBlock / kLanes, n, device);
  copy_rows_kernel<Word, kGather, kLanes><<<blocks, kBlock, 0, stream>>>(
      table, s.rows_per_part, s.entry_bytes, s.offset_bytes, words, index, n, buffer, stride);
}

template <class Word, bool kGather>
void launch_rows(const PartTable& table, const RowSpace& s, const int64_t* index, size_t n,
                 char* buffer, uint64_t stride, int device, cudaStream_t stream) {
  const uint64_t words = s.copy_bytes / sizeof(Word);
  if (words <= 4) {
    launch_lanes<Word, kGather, 4>(table, s, words, index, n, buffer, stride, device, stream);
  } else if (words <= 8) {
    launch_lanes<Word, kGather, 8>(table, s, words, index, n, buffer, stride, device, stream);
  } else if (words <= 16) {
    launch_lanes<Word, kGather, 16>(table, s, words, index, n, buffer, stride, device, stream);
  } else {
    launch_lanes<Word, kGather, kWarp>(table, s, words, index, n, buffer, stride, device, stream);
  }
}

template <class Word>
void launch(const PartTable& table, const RowSpace& s, const int64_t* index, size_t n, char* buffer,
            uint64_t stride, bool gather, int device, cudaStream_t stream) {
  if (gather) {
    launch_rows<Word, true>(table, s, index, n, buffer, stride, device, stream);
  } else {
    launch_rows<Word, false>(table, s, index, n, buffer, stride, device, stream);
  }
}

uint32_t blocks_for(size_t items_per_block_unit, size_t n, int device) {
  const size_t wanted = (n + items_per_block_unit - 1) / items_per_block_unit;
  const size_t most = static_cast<size_t>(core::cuda::multiprocessors(device)) * 16;
  return static_cast<uint32_t>(std::max<size_t>(1, std::min(wanted, most)));
}

}  // namespace

void copy_rows_cuda(const RowSpace& s, const int64_t* index, size_t n, char* buffer,
                    uint64_t buffer_stride, bool gather, int device, StreamHandle stream) {
  if (n == 0 || s.copy_bytes == 0) return;
  if (s.part_count > kMaxCudaParts) {
    throw NotAvailable("wholememory: a CUDA gather / scatter reaches at most " +
                       std::to_string(kMaxCudaParts) + " parts; this memory has " +
                       std::to_string(s.part_count));
  }
  const core::cuda::DeviceGuard on(device);
  PartTable table{};
  // The widest word dividing every address and size the kernel steps by.
  uint64_t align =
      std::gcd(std::gcd(s.entry_bytes, s.offset_bytes), std::gcd(s.copy_bytes, buffer_stride));
  align = std::gcd(align, reinterpret_cast<uint64_t>(buffer));
  for (uint32_t p = 0; p < s.part_count; ++p) {
    table.parts[p] = s.parts[p];
    if (s.parts[p] != nullptr) align = std::gcd(align, reinterpret_cast<uint64_t>(s.parts[p]));
  }
  auto* st = static_cast<cudaStream_t>(stream);
  if (align % 16 == 0) {
    launch<uint4>(table, s, index, n, buffer, buffer_stride, gather, device, st);
  } else if (align % 8 == 0) {
    launch<uint2>(table, s, index, n, buffer, buffer_stride, gather, device, st);
  } else if (align % 4 == 0) {
    launch<uint32_t>(table, s, index, n, buffer, buffer_stride, gather, device, st);
  } else {
    launch<uint8_t>(table, s, index, n, buffer, buffer_stride, gather, device, st);
  }
  core::cuda::check_launch("wholememory copy_rows_kernel");
}

uint64_t count_bad_indices_cuda(const int64_t* index, size_t n, uint64_t rows, int device,
                                StreamHandle stream) {
  if (n == 0) return 0;
  const core::cuda::DeviceGuard on(device);
  auto* st = static_cast<cudaStream_t>(stream);
  unsigned long long* bad = nullptr;
  core::cuda::check(cudaMallocAsync(reinterpret_cast<void**>(&bad), sizeof(*bad), st),
                    "wholememory: cudaMallocAsync");
  core::cuda::check(cudaMemsetAsync(bad, 0, sizeof(*bad), st), "wholememory: cudaMemsetAsync");
  count_bad_kernel<<<blocks_for(kBlock, n, device), kBlock, 0, st>>>(index, n, rows, bad);
  core::cuda::check_launch("wholememory count_bad_kernel");
  unsigned long long host = 0;
  core::cuda::check(cudaMemcpyAsync(&host, bad, sizeof(host), cudaMemcpyDeviceToHost, st),
                    "wholememory: cudaMemcpyAsync");
  core::cuda::check(cudaFreeAsync(bad, st), "wholememory: cudaFreeAsync");
  core::cuda::sync(st, "wholememory: checking indices");
  return host;
}

}  // namespace dynemb::wholememory

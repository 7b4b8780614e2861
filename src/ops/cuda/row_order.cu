// order_rows_by_first_id on the GPU: each row in use flags its first id (the first of its group in
// ids_by_row: the dedup's sort is stable), then CUB's select keeps the flagged ids' rows (their
// inverse) in id order. Only the live rows flag, so a bound of rows costs nothing past them.
#include <cub/device/device_select.cuh>

#include <algorithm>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/ops/step_workspace.hpp"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::as_stream;
using ops::cuda::kBlock;

// first[ids_by_row[row_begin[r]]] = 1 for each row r in use (rows without ids flag nothing).
__global__ void flag_first_ids_kernel(size_t num_rows, const uint64_t* live_rows,
                                      const uint32_t* row_begin, const uint32_t* ids_by_row,
                                      uint8_t* first) {
  const size_t live = live_rows != nullptr && *live_rows < num_rows ? *live_rows : num_rows;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < live;
       r += stride) {
    const uint32_t begin = row_begin[r];
    if (begin < row_begin[r + 1]) first[ids_by_row[begin]] = 1;
  }
}

// Blocks of the flagging pass: one thread a row, at most a few waves (it strides).
constexpr size_t kMaxFlagBlocks = 2048;

}  // namespace

void order_rows_by_first_id_cuda(size_t n, const uint32_t* inverse, size_t num_rows,
                                 const uint64_t* live_rows, IdGroups groups, uint32_t* row_order,
                                 StepWorkspace& workspace, StreamHandle stream_handle) {
  const cudaStream_t stream = as_stream(stream_handle);
  const auto items = static_cast<int64_t>(n);
  size_t select_bytes = 0;
  core::cuda::check(cub::DeviceSelect::Flagged(nullptr, select_bytes, inverse,
                                               static_cast<const uint8_t*>(nullptr), row_order,
                                               static_cast<uint64_t*>(nullptr), items, stream),
                    "order_rows_by_first_id: DeviceSelect::Flagged (size)");
  const auto carve = [&](ScratchCarver& c, uint8_t*& first, uint64_t*& count, void*& temp) {
    first = c.take<uint8_t>(n);
    count = c.take<uint64_t>(1);
    temp = c.take<uint8_t>(select_bytes);
  };
  uint8_t* first = nullptr;
  uint64_t* count = nullptr;
  void* temp = nullptr;
  ScratchCarver measure;
  carve(measure, first, count, temp);
  ScratchCarver block(workspace.row_order_scratch(measure.bytes(), stream_handle));
  carve(block, first, count, temp);
  core::cuda::check(cudaMemsetAsync(first, 0, n, stream),
                    "order_rows_by_first_id: cudaMemsetAsync");
  const size_t blocks = std::min(kMaxFlagBlocks, (num_rows + kBlock - 1) / kBlock);
  flag_first_ids_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      num_rows, live_rows, groups.row_begin, groups.ids_by_row, first);
  core::cuda::check_launch("order_rows_by_first_id: flag_first_ids_kernel");
  core::cuda::check(cub::DeviceSelect::Flagged(temp, select_bytes, inverse, first, row_order, count,
                                               items, stream),
                    "order_rows_by_first_id: DeviceSelect::Flagged");
}

}  // namespace dynemb::ops::detail

// Copies rows between a partitioned row space (a pointer per part) and a dense buffer, by row
// index: the one kernel under every gather and scatter of the part (CPU loop or CUDA kernel).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dynemb/core/stream.hpp"

namespace dynemb::wholememory {

// Rows spread over parts: row i is in part i / rows_per_part at (i % rows_per_part) *
// entry_bytes; the copies touch bytes [offset_bytes, offset_bytes + copy_bytes) of each row.
struct RowSpace {
  char* const* parts = nullptr;  // a host array of the parts' addresses
  uint32_t part_count = 0;
  uint64_t rows_per_part = 0;
  uint64_t entry_bytes = 0;
  uint64_t offset_bytes = 0;
  uint64_t copy_bytes = 0;
};

// gather: buffer row i (at i * buffer_stride) = space row index[i]; scatter: the reverse.
// index and buffer are host memory; rows are addressed as given. Runs on host threads.
void copy_rows_cpu(const RowSpace& space, const int64_t* index, size_t n, char* buffer,
                   uint64_t buffer_stride, bool gather);

// The same on CUDA device `device`, ordered on `stream`; index and buffer in memory the device
// addresses, parts addresses it reaches (at most kMaxCudaParts, passed by value to the kernel).
void copy_rows_cuda(const RowSpace& space, const int64_t* index, size_t n, char* buffer,
                    uint64_t buffer_stride, bool gather, int device, StreamHandle stream);

// How many of index[0, n) (device memory) are outside [0, rows); synchronizes `stream`.
uint64_t count_bad_indices_cuda(const int64_t* index, size_t n, uint64_t rows, int device,
                                StreamHandle stream);

// Parts a CUDA row copy addresses at most (they travel as a kernel argument).
inline constexpr uint32_t kMaxCudaParts = 64;

}  // namespace dynemb::wholememory

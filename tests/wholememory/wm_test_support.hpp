// Helpers of the wholememory tests: the reference contents of a tensor, and gather / scatter
// through host vectors whatever the executor (device buffers staged for CUDA).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/table/table.hpp"
#include "dynemb/wholememory/tensor.hpp"

namespace dynemb::wholememory::testing {

// The reference element (row, col) of a tensor filled under `seed`: a float that names its
// place (a splitmix64 draw, exact in float32).
inline float reference_value(uint64_t seed, uint64_t row, uint64_t col) {
  uint64_t z = seed + row * 0x9E3779B97F4A7C15ull + col * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / 16.0f - 524288.0f;
}

// Rows `rows` of the reference, columns [first, first + count) of `cols`, dense.
inline std::vector<float> reference_rows(uint64_t seed, const std::vector<int64_t>& rows,
                                         uint64_t first, uint64_t count) {
  std::vector<float> out(rows.size() * count);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (uint64_t c = 0; c < count; ++c)
      out[i * count + c] = reference_value(seed, rows[i], first + c);
  }
  return out;
}

// The executor a tensor's location is used with by default.
inline Executor default_executor(MemoryLocation location) {
  return location == MemoryLocation::kHost ? Backend::kCpu : Backend::kCuda;
}

// gather through host vectors: indices and the rows travel to and from the executor's memory.
inline std::vector<float> gather_host(const WholeTensor& t, const std::vector<int64_t>& indices,
                                      Executor executor, Columns columns = {}) {
  const uint64_t count = columns.count == 0 ? t.cols() - columns.first : columns.count;
  std::vector<float> out(indices.size() * count);
  if (executor == Backend::kCpu) {
    gather(t, indices.data(), indices.size(), out.data(), executor, nullptr, columns);
    return out;
  }
  const int device = t.memory().device();
  BackendBuffer<int64_t> d_indices(Backend::kCuda, indices.size(), device);
  d_indices.upload(indices.data(), indices.size());
  BackendBuffer<float> d_out(Backend::kCuda, out.size(), device);
  gather(t, d_indices.data(), indices.size(), d_out.data(), executor, nullptr, columns);
  t.memory().synchronize();  // the copy below may run on another device's stream
  d_out.download(out.data(), out.size());
  return out;
}

// scatter through host vectors.
inline void scatter_host(WholeTensor& t, const std::vector<float>& rows,
                         const std::vector<int64_t>& indices, Executor executor,
                         Columns columns = {}) {
  if (executor == Backend::kCpu) {
    scatter(t, rows.data(), indices.data(), indices.size(), executor, nullptr, columns);
    return;
  }
  const int device = t.memory().device();
  BackendBuffer<int64_t> d_indices(Backend::kCuda, indices.size(), device);
  d_indices.upload(indices.data(), indices.size());
  BackendBuffer<float> d_rows(Backend::kCuda, rows.size(), device);
  d_rows.upload(rows.data(), rows.size());
  scatter(t, d_rows.data(), d_indices.data(), indices.size(), executor, nullptr, columns);
  t.memory().synchronize();
}

// True where the location or executor needs a CUDA device and there is none (skip then).
inline bool cuda_missing(MemoryLocation location, Executor executor) {
  return (location == MemoryLocation::kDevice || executor == Backend::kCuda) &&
         !cuda_backend_available();
}

}  // namespace dynemb::wholememory::testing

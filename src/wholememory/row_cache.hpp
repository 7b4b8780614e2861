// A rank's private, direct-mapped cache of embedding rows in the memory of one executor (device
// memory for a host-located or distributed embedding read by kernels; host memory for one read
// on the CPU): row r lives in slot r % slots when cached. Tags are kept on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "dynemb/core/memory.hpp"

namespace dynemb::wholememory {

class RowCache {
 public:
  // `slots` rows of `row_bytes` in `memory` (on `device` for CUDA).
  RowCache(Backend memory, uint64_t slots, uint64_t row_bytes, int device);

  Backend memory() const { return memory_; }
  uint64_t slots() const { return tags_.size(); }

  // Splits `rows` (host) into hits (their positions and slots) and misses (positions).
  void classify(const std::vector<int64_t>& rows, std::vector<int64_t>& hit_positions,
                std::vector<int64_t>& hit_slots, std::vector<int64_t>& miss_positions) const;

  // Copies the cached rows of `slots` (host) to `out` positions `positions` (host), rows dense in
  // the cache's memory.
  void read(const std::vector<int64_t>& slots, const std::vector<int64_t>& positions,
            char* out) const;

  // Caches rows `rows[i]` (host), whose data is dense row i of `data` (the cache's memory); a
  // slot written twice keeps the last row.
  void insert(const std::vector<int64_t>& rows, const char* data);

  // Forgets any of `rows` it holds; returns how many it forgot.
  uint64_t invalidate(const int64_t* rows, size_t n);
  // Forgets everything.
  void clear();

 private:
  Backend memory_;
  uint64_t row_bytes_;
  int device_;
  std::vector<int64_t> tags_;  // the row in each slot, -1: empty
  BackendBuffer<char> storage_;
};

// Copies dense rows: dst row dst_index[i] = src row src_index[i] (index arrays on the host;
// data in `memory`). A null index means i.
void copy_dense_rows(Backend memory, int device, const char* src, const int64_t* src_index,
                     char* dst, const int64_t* dst_index, size_t n, uint64_t row_bytes);

}  // namespace dynemb::wholememory

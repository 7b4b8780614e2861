// The device (and, in hybrid mode, pinned host) arrays of one CUDA table at one capacity.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/device_layout.hpp"

namespace dynemb::table::cuda {

class TableStorage {
 public:
  TableStorage() = default;
  // Allocates `num_buckets` buckets of `bucket_capacity` slots and empties every slot (ordered
  // on `stream`). Rows beyond `max_hbm_bytes` of values go to mapped pinned host memory. With
  // `score_bounds` (and buckets of kBoundedBucketSlots), also the score bounds, all 0.
  TableStorage(uint64_t num_buckets, uint32_t bucket_capacity, uint32_t dim, uint64_t max_hbm_bytes,
               bool score_bounds, DeviceStats* stats, cudaStream_t stream);
  ~TableStorage();
  TableStorage(const TableStorage&) = delete;
  TableStorage& operator=(const TableStorage&) = delete;
  TableStorage(TableStorage&& other) noexcept;
  TableStorage& operator=(TableStorage&& other) noexcept;

  // The kernels' view of these arrays.
  const TableView& view() const { return view_; }
  uint64_t capacity() const { return view_.num_buckets * view_.bucket_capacity; }

 private:
  void release() noexcept;
  TableView view_{};
};

}  // namespace dynemb::table::cuda

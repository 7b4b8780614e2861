// A write batch's positions grouped by bucket, so that one tile can own each bucket for the
// whole launch and write it without a lock (docs/cuda_table.md, "Grouped writes").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/device_layout.hpp"
#include "dynemb/core/cuda/device_array.hpp"

namespace dynemb::table::cuda {

// Batch positions sorted by their key's bucket; inside a bucket in the order they were given
// (the sort is stable), so a bucket's keys are written in batch order.
struct BucketOrder {
  core::cuda::DeviceArray<uint32_t> buckets;    // bucket of each entry, ascending
  core::cuda::DeviceArray<uint32_t> positions;  // batch position of each entry
  core::cuda::DeviceArray<uint64_t> keys;       // key of each entry
};

// Groups keys[subset[k]] (keys[k] when subset is null), k < n, by bucket of `table`. Requires
// n < 2^31 (CUB's item count) and table.num_buckets <= 2^32.
BucketOrder group_by_bucket(const TableView& table, const uint64_t* keys, const uint32_t* subset,
                            uint64_t n, cudaStream_t stream);

}  // namespace dynemb::table::cuda

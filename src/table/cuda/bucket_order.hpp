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

// The batch positions k < n (subset[k] when subset is set) ordered by their key's bucket, ties in
// the order given: a launch over them visits the table's rows in ascending address order, which
// is what makes host-resident rows fast to reach (docs/cuda_table.md, "Hybrid tables"). Same
// limits as group_by_bucket.
core::cuda::DeviceArray<uint32_t> positions_by_bucket(const TableView& table, const uint64_t* keys,
                                                      const uint32_t* subset, uint64_t n,
                                                      cudaStream_t stream);

// Whether a call of n keys on `table` visits its keys in bucket order (positions_by_bucket):
// tables with host-resident rows, at least kHostOrderMinBatch keys, within the sort's limits.
inline constexpr uint64_t kHostOrderMinBatch = uint64_t{1} << 14;
inline bool visits_in_bucket_order(const TableView& table, uint64_t n) {
  return table.host_values != nullptr && n >= kHostOrderMinBatch && n < (uint64_t{1} << 31) &&
         table.num_buckets <= (uint64_t{1} << 32);
}

}  // namespace dynemb::table::cuda

#include "cuda/table_storage.hpp"

#include <algorithm>
#include <utility>

#include "dynemb/core/cuda/check.hpp"

namespace dynemb::table::cuda {

TableStorage::TableStorage(uint64_t num_buckets, uint32_t bucket_capacity, uint32_t dim,
                           uint64_t max_hbm_bytes, bool score_bounds, DeviceStats* stats,
                           cudaStream_t stream) {
  const uint64_t slots = num_buckets * bucket_capacity;
  view_.num_buckets = num_buckets;
  view_.bucket_capacity = bucket_capacity;
  view_.dim = dim;
  view_.stats = stats;
  const uint64_t row_bytes = static_cast<uint64_t>(dim) * sizeof(float);
  view_.hbm_rows = std::min<uint64_t>(slots, max_hbm_bytes / row_bytes);
  try {
    core::cuda::check(cudaMalloc(reinterpret_cast<void**>(&view_.keys), slots * sizeof(uint64_t)),
                      "cudaMalloc (keys)");
    core::cuda::check(cudaMalloc(reinterpret_cast<void**>(&view_.digests), slots),
                      "cudaMalloc (digests)");
    core::cuda::check(cudaMalloc(reinterpret_cast<void**>(&view_.scores), slots * sizeof(uint64_t)),
                      "cudaMalloc (scores)");
    core::cuda::check(
        cudaMalloc(reinterpret_cast<void**>(&view_.bucket_sizes), num_buckets * sizeof(int32_t)),
        "cudaMalloc (bucket sizes)");
    core::cuda::check(
        cudaMalloc(reinterpret_cast<void**>(&view_.locks), num_buckets * sizeof(uint32_t)),
        "cudaMalloc (bucket locks)");
    const uint64_t bounds = num_buckets * kScoreGroups;
    if (score_bounds && bucket_capacity == kBoundedBucketSlots) {
      core::cuda::check(
          cudaMalloc(reinterpret_cast<void**>(&view_.score_bounds), bounds * sizeof(uint64_t)),
          "cudaMalloc (score bounds)");
    }
    if (view_.hbm_rows > 0) {
      core::cuda::check(
          cudaMalloc(reinterpret_cast<void**>(&view_.hbm_values), view_.hbm_rows * row_bytes),
          "cudaMalloc (values in HBM)");
    }
    if (slots > view_.hbm_rows) {
      void* host = nullptr;
      core::cuda::check(cudaHostAlloc(&host, (slots - view_.hbm_rows) * row_bytes,
                                      cudaHostAllocMapped | cudaHostAllocPortable),
                        "cudaHostAlloc (values in pinned host memory)");
      view_.host_values = static_cast<float*>(host);
      void* mapped = nullptr;
      core::cuda::check(cudaHostGetDevicePointer(&mapped, host, 0), "cudaHostGetDevicePointer");
      view_.host_values = static_cast<float*>(mapped);
    }
    core::cuda::check(cudaMemsetAsync(view_.keys, 0xFF, slots * sizeof(uint64_t), stream),
                      "cudaMemset (keys)");
    core::cuda::check(cudaMemsetAsync(view_.digests, kEmptyDigest, slots, stream),
                      "cudaMemset (digests)");
    core::cuda::check(cudaMemsetAsync(view_.scores, 0, slots * sizeof(uint64_t), stream),
                      "cudaMemset (scores)");
    core::cuda::check(cudaMemsetAsync(view_.bucket_sizes, 0, num_buckets * sizeof(int32_t), stream),
                      "cudaMemset (bucket sizes)");
    core::cuda::check(cudaMemsetAsync(view_.locks, 0, num_buckets * sizeof(uint32_t), stream),
                      "cudaMemset (locks)");
    if (view_.score_bounds != nullptr) {
      core::cuda::check(cudaMemsetAsync(view_.score_bounds, 0, bounds * sizeof(uint64_t), stream),
                        "cudaMemset (score bounds)");
    }
  } catch (...) {
    release();
    throw;
  }
}

TableStorage::~TableStorage() {
  release();
}

TableStorage::TableStorage(TableStorage&& other) noexcept : view_(other.view_) {
  other.view_ = TableView{};
}

TableStorage& TableStorage::operator=(TableStorage&& other) noexcept {
  if (this != &other) {
    release();
    view_ = other.view_;
    other.view_ = TableView{};
  }
  return *this;
}

void TableStorage::release() noexcept {
  cudaFree(view_.keys);
  cudaFree(view_.digests);
  cudaFree(view_.scores);
  cudaFree(view_.bucket_sizes);
  cudaFree(view_.locks);
  cudaFree(view_.score_bounds);
  cudaFree(view_.hbm_values);
  // With unified addressing the mapped pointer is the host pointer.
  if (view_.host_values != nullptr) cudaFreeHost(view_.host_values);
  view_ = TableView{};
}

}  // namespace dynemb::table::cuda

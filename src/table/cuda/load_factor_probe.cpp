#include "table/cuda/load_factor_probe.hpp"

#include <cstddef>

#include "core/cuda/check.hpp"
#include "table/cuda/kernels.hpp"

namespace dynemb::cuda_table {

LoadFactorProbe::LoadFactorProbe() {
  cuda::check(cudaMalloc(reinterpret_cast<void**>(&state_), sizeof(CallState)),
              "cudaMalloc (load factor probe)");
  cuda::check(cudaMallocHost(reinterpret_cast<void**>(&host_count_), sizeof *host_count_),
              "cudaMallocHost (load factor probe)");
  cuda::check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming),
              "cudaEventCreate (load factor probe)");
}

LoadFactorProbe::~LoadFactorProbe() {
  if (copied_ != nullptr) {
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
  }
  if (host_count_ != nullptr) cudaFreeHost(host_count_);
  if (state_ != nullptr) cudaFree(state_);
}

void LoadFactorProbe::collect() {
  if (!in_flight_) return;
  const cudaError_t status = cudaEventQuery(copied_);
  if (status == cudaErrorNotReady) return;
  cuda::check(status, "cudaEventQuery (load factor probe)");
  known_count_ = *host_count_;
  written_at_known_ = written_at_issue_;
  in_flight_ = false;
}

void LoadFactorProbe::after_write(const TableView& table, uint64_t keys, cudaStream_t stream) {
  collect();
  written_ += keys;
  const uint64_t capacity = table.num_buckets * table.bucket_capacity;
  const bool due = !counted_ || written_ - written_at_issue_ >= capacity / kCountsPerFill;
  if (!due || in_flight_) return;
  launch_init_state(state_, 0, stream);
  launch_count_size(table, state_, stream);
  cuda::check(cudaMemcpyAsync(host_count_, &state_->count, sizeof *host_count_,
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (load factor probe)");
  cuda::check(cudaEventRecord(copied_, stream), "cudaEventRecord (load factor probe)");
  in_flight_ = true;
  counted_ = true;
  written_at_issue_ = written_;
}

double LoadFactorProbe::upper_bound(uint64_t count, uint64_t written_since, uint64_t capacity) {
  if (capacity == 0 || count >= capacity || written_since >= capacity - count) return 1.0;
  return static_cast<double>(count + written_since) / static_cast<double>(capacity);
}

double LoadFactorProbe::load_factor_bound(uint64_t capacity) {
  collect();
  return upper_bound(known_count_, written_ - written_at_known_, capacity);
}

}  // namespace dynemb::cuda_table

// assign_scores_at: scores written where a row address from find_pointers says the key is, a
// thread a key and no lock (scores only, as assign_scores). A hint that no longer points at the
// key's slot (null, evicted, moved by a growth) costs the thread a lookup of the key instead.
#include "cuda/kernels.hpp"
#include "cuda/probe.cuh"
#include "dynemb/core/cuda/check.hpp"

namespace dynemb::table::cuda {
namespace {

constexpr uint64_t kNoSlot = ~0ull;

// The slot whose row is at `row` (HBM or host rows of t), or kNoSlot for an address that is no
// row of t.
__device__ __forceinline__ uint64_t slot_of_row(const TableView& t, const float* row) {
  const uint64_t capacity = t.num_buckets * t.bucket_capacity;
  const auto at = reinterpret_cast<uintptr_t>(row);
  const auto hbm = reinterpret_cast<uintptr_t>(t.hbm_values);
  const uint64_t row_bytes = uint64_t{t.dim} * sizeof(float);
  if (t.hbm_values != nullptr && at >= hbm && at < hbm + t.hbm_rows * row_bytes) {
    const uint64_t offset = at - hbm;
    return offset % row_bytes == 0 ? offset / row_bytes : kNoSlot;
  }
  const auto host = reinterpret_cast<uintptr_t>(t.host_values);
  if (t.host_values != nullptr && at >= host && at < host + (capacity - t.hbm_rows) * row_bytes) {
    const uint64_t offset = at - host;
    return offset % row_bytes == 0 ? t.hbm_rows + offset / row_bytes : kNoSlot;
  }
  return kNoSlot;
}

__global__ void assign_scores_at_kernel(TableView t, const uint64_t* keys, float* const* rows,
                                        const uint64_t* scores, uint64_t n) {
  unsigned long long reserved = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const uint64_t key = keys[i];
    if (key >= kFirstReservedKey) {
      ++reserved;
      continue;
    }
    uint64_t slot = kNoSlot;
    const float* row = rows[i];
    if (row != nullptr) {
      slot = slot_of_row(t, row);
      if (slot != kNoSlot && __ldcg(t.keys + slot) != key) slot = kNoSlot;
    }
    if (slot == kNoSlot) {
      const uint64_t hash = hash_key_bits(key);
      const uint64_t bucket = bucket_of_hash(hash, t.num_buckets);
      const int hit = find_in_bucket_alone(t, bucket, key, slot_digest_of_hash(hash));
      if (hit < 0) continue;
      slot = bucket * t.bucket_capacity + static_cast<uint64_t>(hit);
    }
    t.scores[slot] = scores[i];
  }
  for (int offset = 16; offset > 0; offset /= 2)
    reserved += __shfl_down_sync(~0u, reserved, offset);
  if (threadIdx.x % 32 == 0 && reserved != 0) atomicAdd(&t.stats->reserved_keys, reserved);
}

}  // namespace

void launch_assign_scores_at(const TableView& table, const uint64_t* keys, float* const* rows,
                             const uint64_t* scores, uint64_t n, cudaStream_t stream) {
  if (n == 0) return;
  assign_scores_at_kernel<<<blocks_for_threads(n, 65535), 256, 0, stream>>>(table, keys, rows,
                                                                            scores, n);
  core::cuda::check(cudaGetLastError(), "assign_scores_at_kernel launch");
}

}  // namespace dynemb::table::cuda

// Whole-table kernels: rehash into twice the buckets, erase_if, clear, export of a slot range,
// and the stable miss-list compaction of find_with_misses (CUB's DeviceSelect keeps order).
#include <thrust/iterator/counting_iterator.h>
#include <cub/device/device_select.cuh>

#include "cuda/kernels.hpp"
#include "cuda/probe.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"

namespace dynemb::table::cuda {
namespace {

// One tile per old bucket b: its keys go to buckets 2b and 2b + 1 of `to`, packed from slot 0.
__global__ void __launch_bounds__(kBlockThreads) rehash_kernel(TableView from, TableView to) {
  const Tile tile = cg::tiled_partition<kTileSize>(cg::this_thread_block());
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kTilesPerBlock;
  const uint32_t lane = tile.thread_rank();
  const uint32_t below = (1u << lane) - 1u;
  for (uint64_t b = blockIdx.x * kTilesPerBlock + tile.meta_group_rank(); b < from.num_buckets;
       b += stride) {
    uint32_t filled[2] = {0, 0};
    const uint64_t old_base = b * from.bucket_capacity;
    for (uint32_t chunk = 0; chunk < from.bucket_capacity; chunk += kTileSize) {
      const uint64_t old_slot = old_base + chunk + lane;
      const uint64_t key = from.keys[old_slot];
      const bool valid = key != kEmptyKey;
      const uint64_t hash = hash_key_bits(key);
      const uint32_t half =
          valid ? static_cast<uint32_t>(bucket_of_hash(hash, to.num_buckets) - 2 * b) : 0u;
      const uint32_t in_low = tile.ballot(valid && half == 0);
      const uint32_t in_high = tile.ballot(valid && half == 1);
      const uint32_t mine = half == 0 ? in_low : in_high;
      const uint64_t new_slot =
          (2 * b + half) * to.bucket_capacity + filled[half] + __popc(mine & below);
      if (valid) {
        to.keys[new_slot] = key;
        to.digests[new_slot] = slot_digest_of_hash(hash);
        to.scores[new_slot] = from.scores[old_slot];
      }
      filled[0] += __popc(in_low);
      filled[1] += __popc(in_high);
      uint32_t moving = in_low | in_high;
      while (moving != 0) {
        const int src_lane = __ffs(moving) - 1;
        moving &= moving - 1;
        const uint64_t src = tile.shfl(old_slot, src_lane);
        const uint64_t dst = tile.shfl(new_slot, src_lane);
        copy_row<false, false>(tile, row_of(to, dst), row_of(from, src), from.dim);
      }
    }
    if (lane == 0) {
      to.bucket_sizes[2 * b] = static_cast<int32_t>(filled[0]);
      to.bucket_sizes[2 * b + 1] = static_cast<int32_t>(filled[1]);
    }
  }
}

__global__ void erase_if_kernel(TableView t, uint8_t compare, uint64_t threshold, CallState* s) {
  __shared__ unsigned long long erased;
  if (threadIdx.x == 0) erased = 0;
  __syncthreads();
  const ScorePredicate pred{static_cast<ScoreCompare>(compare), threshold};
  const uint64_t slots = t.num_buckets * t.bucket_capacity;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < slots;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if (t.keys[i] != kEmptyKey && matches(pred, t.scores[i])) {
      t.keys[i] = kEmptyKey;
      t.digests[i] = kEmptyDigest;
      atomicSub(reinterpret_cast<unsigned int*>(t.bucket_sizes + i / t.bucket_capacity), 1u);
      atomicAdd(&erased, 1ull);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && erased != 0) {
    atomicAdd(&s->count, erased);
    atomicAdd(&t.stats->erased, erased);
  }
}

// Selects stored slots (optionally with score >= min) for export.
struct StoredSlot {
  const uint64_t* keys;
  const uint64_t* scores;
  bool has_min;
  uint64_t min_score;
  __device__ bool operator()(uint64_t slot) const {
    return keys[slot] != kEmptyKey && (!has_min || scores[slot] >= min_score);
  }
};

// Selects the batch positions whose key was not found.
struct NotFound {
  const bool* founds;
  __device__ bool operator()(uint64_t i) const { return !founds[i]; }
};

template <bool kVec>
__global__ void __launch_bounds__(kBlockThreads)
    gather_slots_kernel(TableView t, const uint64_t* slots, const unsigned long long* count,
                        uint64_t* keys, float* values, uint64_t* scores) {
  const Tile tile = cg::tiled_partition<kTileSize>(cg::this_thread_block());
  const uint64_t n = *count;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kTilesPerBlock;
  for (uint64_t k = blockIdx.x * kTilesPerBlock + tile.meta_group_rank(); k < n; k += stride) {
    const uint64_t slot = slots[k];
    if (tile.thread_rank() == 0) {
      keys[k] = t.keys[slot];
      if (scores != nullptr) scores[k] = t.scores[slot];
    }
    if (values != nullptr) copy_row<kVec, false>(tile, values + k * t.dim, row_of(t, slot), t.dim);
  }
}

__global__ void gather_keys_kernel(const uint64_t* keys, const uint64_t* positions,
                                   const unsigned long long* count, uint64_t* out) {
  const uint64_t n = *count;
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    out[k] = keys[positions[k]];
  }
}

// Stable selection of the indices [first, first + n) that satisfy `pred`, into out; the count
// goes to *count.
template <class Pred>
void select_indices(uint64_t first, uint64_t n, Pred pred, uint64_t* out, unsigned long long* count,
                    cudaStream_t stream) {
  thrust::counting_iterator<uint64_t> in(first);
  size_t temp_bytes = 0;
  core::cuda::check(cub::DeviceSelect::If(nullptr, temp_bytes, in, out, count,
                                          static_cast<int64_t>(n), pred, stream),
                    "cub::DeviceSelect::If (size)");
  const core::cuda::DeviceArray<uint8_t> temp(temp_bytes, stream);
  core::cuda::check(cub::DeviceSelect::If(temp.data(), temp_bytes, in, out, count,
                                          static_cast<int64_t>(n), pred, stream),
                    "cub::DeviceSelect::If");
}

}  // namespace

void launch_rehash(const TableView& from, const TableView& to, cudaStream_t stream) {
  const unsigned blocks = blocks_for_tiles(from.num_buckets, 65535ull * 64);
  rehash_kernel<<<blocks, kBlockThreads, 0, stream>>>(from, to);
  core::cuda::check(cudaGetLastError(), "rehash_kernel launch");
}

void launch_erase_if(const TableView& t, uint8_t compare, uint64_t threshold, CallState* state,
                     cudaStream_t stream) {
  erase_if_kernel<<<blocks_for_threads(t.num_buckets * t.bucket_capacity, 65535ull * 16), 256, 0,
                    stream>>>(t, compare, threshold, state);
  core::cuda::check(cudaGetLastError(), "erase_if_kernel launch");
}

void launch_clear(const TableView& t, cudaStream_t stream) {
  const uint64_t slots = t.num_buckets * t.bucket_capacity;
  core::cuda::check(cudaMemsetAsync(t.keys, 0xFF, slots * sizeof(uint64_t), stream), "clear keys");
  core::cuda::check(cudaMemsetAsync(t.digests, kEmptyDigest, slots, stream), "clear digests");
  core::cuda::check(cudaMemsetAsync(t.bucket_sizes, 0, t.num_buckets * sizeof(int32_t), stream),
                    "clear bucket sizes");
  core::cuda::check(cudaMemsetAsync(t.locks, 0, t.num_buckets * sizeof(uint32_t), stream),
                    "clear locks");
  if (t.score_bounds != nullptr) {
    core::cuda::check(
        cudaMemsetAsync(t.score_bounds, 0, t.num_buckets * kScoreGroups * sizeof(uint64_t), stream),
        "clear score bounds");
  }
}

void launch_export(const TableView& t, uint64_t offset, uint64_t n_slots, bool has_min,
                   uint64_t min_score, uint64_t* keys, float* values, uint64_t* scores,
                   CallState* state, cudaStream_t stream) {
  if (n_slots == 0) return;
  const core::cuda::DeviceArray<uint64_t> slot_list(n_slots, stream);
  uint64_t* slots = slot_list.data();
  select_indices(offset, n_slots, StoredSlot{t.keys, t.scores, has_min, min_score}, slots,
                 &state->count, stream);
  const unsigned blocks = blocks_for_tiles(n_slots, 65535ull * 16);
  // float4 row copies where the rows allow: a row read from host memory as 16-byte accesses
  // takes a quarter of the PCIe requests.
  const bool vec =
      t.dim % 4 == 0 && aligned16(values) && aligned16(t.hbm_values) && aligned16(t.host_values);
  if (vec) {
    gather_slots_kernel<true>
        <<<blocks, kBlockThreads, 0, stream>>>(t, slots, &state->count, keys, values, scores);
  } else {
    gather_slots_kernel<false>
        <<<blocks, kBlockThreads, 0, stream>>>(t, slots, &state->count, keys, values, scores);
  }
  core::cuda::check(cudaGetLastError(), "gather_slots_kernel launch");
}

void launch_select_misses(const bool* founds, const uint64_t* keys, uint64_t n,
                          uint64_t* missed_keys, uint64_t* missed_indices, CallState* state,
                          cudaStream_t stream) {
  if (n == 0) return;
  select_indices(0, n, NotFound{founds}, missed_indices, &state->count, stream);
  gather_keys_kernel<<<blocks_for_threads(n, 65535ull * 16), 256, 0, stream>>>(
      keys, missed_indices, &state->count, missed_keys);
  core::cuda::check(cudaGetLastError(), "gather_keys_kernel launch");
}

}  // namespace dynemb::table::cuda

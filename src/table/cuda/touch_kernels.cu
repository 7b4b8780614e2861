// find_or_insert's lock-free first pass: every key already stored is found without a lock, its
// row copied out (or its address written) and its score touched atomically; keys not found are
// listed for the locked write kernel. Safe because nothing inserts, evicts or erases while it
// runs (the call holds the table's writer lock and the locked pass comes after it in stream
// order), and rows are only read.
#include "cuda/kernels.hpp"
#include "cuda/probe.cuh"
#include "dynemb/core/cuda/check.hpp"

namespace dynemb::table::cuda {
namespace {

template <bool kVec>
__global__ void __launch_bounds__(kBlockThreads) find_and_touch_kernel(TableView t, TouchArgs a) {
  __shared__ unsigned long long reserved;
  if (threadIdx.x == 0) reserved = 0;
  __syncthreads();
  const bool aborted = !a.skip_reserved && a.state->reserved_position != kNoPosition;
  const Tile tile = cg::tiled_partition<kTileSize>(cg::this_thread_block());
  const bool leader = tile.thread_rank() == 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kTilesPerBlock;
  for (uint64_t k = blockIdx.x * kTilesPerBlock + tile.meta_group_rank(); k < a.n && !aborted;
       k += stride) {
    const uint64_t i = a.subset != nullptr ? a.subset[k] : k;
    const uint64_t key = a.keys[i];
    if (key >= kFirstReservedKey) {
      if (leader) {
        atomicAdd(&reserved, 1ull);
        if (a.founds != nullptr) a.founds[i] = false;
        if (a.row_ptrs != nullptr) a.row_ptrs[i] = nullptr;
      }
      continue;
    }
    const uint64_t hash = hash_key_bits(key);
    const uint64_t bucket = bucket_of_hash(hash, t.num_buckets);
    const int found = find_in_bucket<false>(tile, t, bucket, key, slot_digest_of_hash(hash));
    if (found < 0) {
      if (leader) a.missed_out[atomicAdd(&a.state->missed, 1ull)] = static_cast<uint32_t>(i);
      continue;
    }
    const uint64_t slot = bucket * t.bucket_capacity + static_cast<uint64_t>(found);
    float* row = row_of(t, slot);
    if (a.row_ptrs != nullptr) {
      if (leader) a.row_ptrs[i] = row;
    } else {
      copy_row<kVec, false>(tile, a.values_out + i * t.dim, row, t.dim);
    }
    if (leader) {
      if (a.founds != nullptr) a.founds[i] = true;
      const bool has_given = a.scores_in != nullptr;
      const uint64_t now = a.policy == ScorePolicy::kTimestamp ? global_time_ns() : a.clock;
      touch_score(t.scores + slot, a.policy, has_given, has_given ? a.scores_in[i] : 0, now);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && reserved != 0) {
    atomicAdd(&t.stats->reserved_keys, reserved);
    atomicAdd(&a.state->reserved, reserved);
  }
}

}  // namespace

void launch_find_and_touch(const TableView& t, const TouchArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  const unsigned blocks = blocks_for_tiles(a.n, 65535ull * 64);
  const bool vec = t.dim % 4 == 0 && aligned16(a.values_out) && aligned16(t.hbm_values) &&
                   aligned16(t.host_values);
  if (vec) {
    find_and_touch_kernel<true><<<blocks, kBlockThreads, 0, stream>>>(t, a);
  } else {
    find_and_touch_kernel<false><<<blocks, kBlockThreads, 0, stream>>>(t, a);
  }
  core::cuda::check(cudaGetLastError(), "find_and_touch_kernel launch");
}

}  // namespace dynemb::table::cuda

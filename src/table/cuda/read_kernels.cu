// Lock-free lookups (find, contains) and the small per-call kernels: call-state setup, the
// reserved-key check and the size count. Readers never run beside writers (the host lock and
// stream events order them), so they use ordinary cached loads.

#include "cuda/kernels.hpp"
#include "cuda/probe.cuh"
#include "dynemb/core/cuda/check.hpp"

namespace dynemb::table::cuda {
namespace {

// The join epoch after `epoch` (CopyJoins): the next one, or 1 after the last, when every tag
// is cleared first (once in 2^29 launches; one thread: it runs in a 1-thread kernel).
__device__ unsigned int next_join_epoch(unsigned int epoch, const CopyJoins& joins) {
  if (epoch + 1 < (1u << kJoinEpochBits)) return epoch + 1;
  for (uint64_t e = 0; e < (uint64_t{1} << joins.entry_bits); ++e) joins.tags[e] = 0;
  return 1;
}

__global__ void init_state_kernel(CallState* s, long long budget, CopyJoins joins) {
  const unsigned int epoch = s->join_epoch;
  *s = CallState{};
  s->reserved_position = kNoPosition;
  s->first_refused_position = kNoPosition;
  s->budget = budget;
  if (joins.tags != nullptr) s->join_epoch = next_join_epoch(epoch, joins);
}

__global__ void reset_retry_kernel(CallState* s, long long budget, CopyJoins joins) {
  s->deferred = 0;
  s->budget = budget;
  if (joins.tags != nullptr) s->join_epoch = next_join_epoch(s->join_epoch, joins);
}

__global__ void reserved_check_kernel(const uint64_t* keys, uint64_t n, CallState* s) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if (keys[i] >= kFirstReservedKey) atomicMin(&s->reserved_position, i);
  }
}

// kOrdered: the launch covers keys[a.subset[k]] and, with a.host_rows, lists found host rows
// instead of copying them (a large call on a hybrid table). A template argument, so the other
// lookups keep their registers (the ordered form's run-time branches took the row-copying find
// from 32 to 40 registers and the 4-thread lookups from 52 to 80 bytes of spills).
template <bool kVec, uint32_t kT, bool kOrdered>
__global__ void __launch_bounds__(kBlockThreads, kT == 4 ? 8 : 0)
    find_kernel(TableView t, ReadArgs a) {
  constexpr uint32_t kTilesPerBlock = kBlockThreads / kT;
  if (a.only_if_nonzero != nullptr && *a.only_if_nonzero == 0) return;  // the whole grid
  __shared__ unsigned long long reserved;
  if (threadIdx.x == 0) reserved = 0;
  __syncthreads();
  const TileOf<kT> tile = cg::tiled_partition<kT>(cg::this_thread_block());
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kTilesPerBlock;
  const bool leader = tile.thread_rank() == 0;
  for (uint64_t k = blockIdx.x * kTilesPerBlock + tile.meta_group_rank(); k < a.n; k += stride) {
    const uint64_t i = kOrdered ? a.subset[k] : k;
    const uint64_t key = a.keys[i];
    int found = -1;
    uint64_t bucket = 0;
    if (key >= kFirstReservedKey) {
      if (leader) atomicAdd(&reserved, 1ull);
    } else {
      const uint64_t hash = hash_key_bits(key);
      bucket = bucket_of_hash(hash, t.num_buckets);
      found = find_in_bucket<false>(tile, t, bucket, key, slot_digest_of_hash(hash));
    }
    uint64_t host_row = kNoHostRow;
    if (found >= 0) {
      const uint64_t slot = bucket * t.bucket_capacity + static_cast<uint64_t>(found);
      if (kOrdered && a.host_rows != nullptr && slot >= t.hbm_rows) {
        host_row = slot - t.hbm_rows;
      } else if (a.values != nullptr) {
        copy_row<kVec, false>(tile, a.values + i * t.dim, row_of(t, slot), t.dim);
      }
      if (leader && a.scores != nullptr) a.scores[i] = t.scores[slot];
    }
    if (kOrdered && leader && a.host_rows != nullptr) a.host_rows[k] = host_row;
    if (leader && a.founds != nullptr) a.founds[i] = found >= 0;
    if (leader && a.row_ptrs != nullptr)
      a.row_ptrs[i] = found >= 0
                          ? row_of(t, bucket * t.bucket_capacity + static_cast<uint64_t>(found))
                          : nullptr;
  }
  __syncthreads();
  if (threadIdx.x == 0 && reserved != 0 && a.skip_reserved) {
    atomicAdd(&t.stats->reserved_keys, reserved);
    if (a.state != nullptr) atomicAdd(&a.state->reserved, reserved);
  }
}

// The slot whose row is at `row` (an address row_of gave).
__device__ __forceinline__ uint64_t slot_of_row(const TableView& t, const float* row) {
  const auto at = reinterpret_cast<uintptr_t>(row);
  const auto hbm = reinterpret_cast<uintptr_t>(t.hbm_values);
  const uint64_t row_bytes = uint64_t{t.dim} * sizeof(float);
  if (t.hbm_values != nullptr && at >= hbm && at < hbm + t.hbm_rows * row_bytes)
    return (at - hbm) / row_bytes;
  return t.hbm_rows + (at - reinterpret_cast<uintptr_t>(t.host_values)) / row_bytes;
}

// One thread a key: an address whose slot still holds the key stays; any other (the key moved
// or left, or had no address) is looked up again by a scan of the key's bucket, rare enough for
// one thread.
__global__ void verify_row_ptrs_kernel(TableView t, const uint64_t* keys, uint64_t n, float** rows,
                                       const unsigned long long* only_if_nonzero,
                                       const unsigned long long* n_device) {
  if (only_if_nonzero != nullptr && *only_if_nonzero == 0) return;  // the whole grid
  if (n_device != nullptr && *n_device < n) n = *n_device;
  const uint64_t capacity = t.num_buckets * t.bucket_capacity;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t key = keys[i];
    if (key >= kFirstReservedKey) continue;  // no address, as the write left it
    const float* row = rows[i];
    if (row != nullptr) {
      const uint64_t slot = slot_of_row(t, row);
      if (slot < capacity && t.keys[slot] == key) continue;
    }
    const uint64_t hash = hash_key_bits(key);
    const uint64_t base = bucket_of_hash(hash, t.num_buckets) * t.bucket_capacity;
    const uint8_t digest = slot_digest_of_hash(hash);
    float* found = nullptr;
    for (uint32_t s = 0; s < t.bucket_capacity; ++s) {
      if (t.digests[base + s] == digest && t.keys[base + s] == key) {
        found = row_of(t, base + s);
        break;
      }
    }
    rows[i] = found;
  }
}

// Row host_rows[k] of host memory to row positions[k] (k when null) of values, k < n, one warp
// per row with W-wide accesses; entries of kNoHostRow are skipped. The list is in address order
// and a warp per row keeps few rows in flight, so the rows reached at once lie close together:
// that is what makes host rows fast to read (docs/cuda_table.md, "Hybrid tables").
template <class W>
__global__ void __launch_bounds__(kBlockThreads)
    gather_host_rows_kernel(const float* host_values, uint32_t dim, const uint64_t* host_rows,
                            const uint32_t* positions, uint64_t n, float* values) {
  const uint64_t k = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (k >= n) return;
  const uint64_t row = host_rows[k];
  if (row == kNoHostRow) return;
  const uint64_t to = positions != nullptr ? positions[k] : k;
  constexpr uint32_t kFloats = sizeof(W) / sizeof(float);
  const W* __restrict__ src = reinterpret_cast<const W*>(host_values + row * dim);
  W* __restrict__ dst = reinterpret_cast<W*>(values + to * dim);
  for (uint32_t j = threadIdx.x % 32; j < dim / kFloats; j += 32) dst[j] = src[j];
}

__global__ void count_size_kernel(const int32_t* sizes, uint64_t n, CallState* s) {
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    mine += static_cast<unsigned long long>(sizes[i]);
  }
  if (mine != 0) atomicAdd(&total, mine);
  __syncthreads();
  if (threadIdx.x == 0 && total != 0) {
    atomicAdd(&s->count, total);
    atomicAdd(reinterpret_cast<unsigned long long*>(&s->budget),
              static_cast<unsigned long long>(-static_cast<long long>(total)));
  }
}

}  // namespace

void launch_init_state(CallState* state, long long budget, cudaStream_t stream,
                       const CopyJoins& joins) {
  init_state_kernel<<<1, 1, 0, stream>>>(state, budget, joins);
  core::cuda::check(cudaGetLastError(), "init_state_kernel launch");
}

void launch_reset_retry(CallState* state, long long budget, cudaStream_t stream,
                        const CopyJoins& joins) {
  reset_retry_kernel<<<1, 1, 0, stream>>>(state, budget, joins);
  core::cuda::check(cudaGetLastError(), "reset_retry_kernel launch");
}

void launch_reserved_check(const uint64_t* keys, uint64_t n, CallState* state,
                           cudaStream_t stream) {
  if (n == 0) return;
  reserved_check_kernel<<<blocks_for_threads(n, 8192), 256, 0, stream>>>(keys, n, state);
  core::cuda::check(cudaGetLastError(), "reserved_check_kernel launch");
}

// Lookups that copy no rows (contains, find_pointers) run 4-thread tiles bounded to 8 blocks a
// SM (32 registers; ptxas spills a few bytes): twice the keys in flight of 8-thread tiles.
// Lookups that copy rows keep 8 threads a key at ptxas's own register choice (32).
void launch_find(const TableView& t, const ReadArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  const unsigned blocks = blocks_for_tiles(a.n, 65535ull * 64);
  const bool vec =
      t.dim % 4 == 0 && aligned16(a.values) && aligned16(t.hbm_values) && aligned16(t.host_values);
  const unsigned blocks4 = blocks_for_tiles(a.n, 65535ull * 64, kBlockThreads / 4);
  if (a.subset != nullptr) {
    if (a.values == nullptr) {
      find_kernel<true, 4, true><<<blocks4, kBlockThreads, 0, stream>>>(t, a);
    } else if (vec) {
      find_kernel<true, kTileSize, true><<<blocks, kBlockThreads, 0, stream>>>(t, a);
    } else {
      find_kernel<false, kTileSize, true><<<blocks, kBlockThreads, 0, stream>>>(t, a);
    }
  } else if (a.values == nullptr) {
    find_kernel<true, 4, false><<<blocks4, kBlockThreads, 0, stream>>>(t, a);
  } else if (vec) {
    find_kernel<true, kTileSize, false><<<blocks, kBlockThreads, 0, stream>>>(t, a);
  } else {
    find_kernel<false, kTileSize, false><<<blocks, kBlockThreads, 0, stream>>>(t, a);
  }
  core::cuda::check(cudaGetLastError(), "find_kernel launch");
  if (a.host_rows == nullptr || a.values == nullptr) return;
  // The host rows the lookup listed: 8-byte accesses where rows allow (a warp reads a row of 64
  // floats in one pass).
  const uint64_t gather_blocks = (a.n * 32 + kBlockThreads - 1) / kBlockThreads;
  const bool pairs = t.dim % 2 == 0 && reinterpret_cast<uintptr_t>(a.values) % 8 == 0 &&
                     reinterpret_cast<uintptr_t>(t.host_values) % 8 == 0;
  if (pairs) {
    gather_host_rows_kernel<float2>
        <<<static_cast<unsigned>(gather_blocks), kBlockThreads, 0, stream>>>(
            t.host_values, t.dim, a.host_rows, a.subset, a.n, a.values);
  } else {
    gather_host_rows_kernel<float>
        <<<static_cast<unsigned>(gather_blocks), kBlockThreads, 0, stream>>>(
            t.host_values, t.dim, a.host_rows, a.subset, a.n, a.values);
  }
  core::cuda::check(cudaGetLastError(), "gather_host_rows_kernel launch");
}

void launch_verify_row_ptrs(const TableView& t, const uint64_t* keys, uint64_t n, float** rows,
                            const unsigned long long* only_if_nonzero, cudaStream_t stream,
                            const unsigned long long* n_device) {
  if (n == 0) return;
  // Grid-stride: without evictions every block only reads the count and leaves, so a grid for the
  // bound n (often several times the keys the device counted) costs launch time for nothing.
  // So the grid is capped at 1024 blocks.
  verify_row_ptrs_kernel<<<blocks_for_threads(n, 1024), 256, 0, stream>>>(
      t, keys, n, rows, only_if_nonzero, n_device);
  core::cuda::check(cudaGetLastError(), "verify_row_ptrs_kernel launch");
}

void launch_count_size(const TableView& t, CallState* state, cudaStream_t stream) {
  count_size_kernel<<<blocks_for_threads(t.num_buckets, 8192), 256, 0, stream>>>(
      t.bucket_sizes, t.num_buckets, state);
  core::cuda::check(cudaGetLastError(), "count_size_kernel launch");
}

}  // namespace dynemb::table::cuda

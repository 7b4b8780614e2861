// The write kernels: find_or_insert, insert_or_assign, insert_and_evict, assign,
// assign_scores, accum_or_assign and erase share one body. A tile owns the key's bucket (a
// grouped launch: the batch is sorted by bucket and one tile writes each bucket's keys in
// order; otherwise it takes the bucket's lock), probes it, then updates, inserts (empty slot,
// or the victim at max capacity), refuses, or defers the key to after a growth.
#include "core/cuda/check.hpp"
#include "dynemb/core/score.hpp"
#include "table/cuda/kernels.hpp"
#include "table/cuda/probe.cuh"

namespace dynemb::cuda_table {
namespace {

// Per-block tallies, flushed to the table's stats and the call state once per block.
struct BlockCounts {
  unsigned long long evictions;
  unsigned long long refused;
  unsigned long long reserved;
  unsigned long long erased;
};

constexpr bool inserts(WriteOp op) {
  return op == WriteOp::kFindOrInsert || op == WriteOp::kInsertOrAssign ||
         op == WriteOp::kInsertAndEvict || op == WriteOp::kAccumOrAssign;
}

// Appends (key, row, score) to the insert_and_evict outputs.
template <bool kVec>
__device__ void emit(const Tile& tile, const WriteArgs& a, uint64_t key, const float* row,
                     uint64_t score, uint32_t dim, bool coherent_row) {
  unsigned long long pos = 0;
  if (tile.thread_rank() == 0) pos = atomicAdd(&a.state->emitted, 1ull);
  pos = tile.shfl(pos, 0);
  if (tile.thread_rank() == 0) {
    a.evicted_keys[pos] = key;
    if (a.evicted_scores != nullptr) a.evicted_scores[pos] = score;
  }
  if (a.evicted_values != nullptr) {
    if (coherent_row) {
      copy_row<kVec, true>(tile, a.evicted_values + pos * dim, row, dim);
    } else {
      copy_row<kVec, false>(tile, a.evicted_values + pos * dim, row, dim);
    }
  }
}

// Keeps the refusal with the smallest batch position (ERROR mode's message).
__device__ void record_refusal(CallState* s, uint64_t position, uint64_t key, uint64_t score,
                               uint64_t bucket_min) {
  while (atomicCAS(&s->refusal_lock, 0u, 1u) != 0u) __nanosleep(20);
  __threadfence();
  volatile CallState* v = s;
  if (position < v->first_refused_position) {
    v->first_refused_position = position;
    v->first_refused_key = key;
    v->first_refused_score = score;
    v->first_refused_bucket_min = bucket_min;
  }
  __threadfence();
  atomicExch(&s->refusal_lock, 0u);
}

constexpr bool stores_input(WriteOp op) {
  return op == WriteOp::kInsertOrAssign || op == WriteOp::kInsertAndEvict ||
         op == WriteOp::kAssign || op == WriteOp::kAccumOrAssign;
}

// float4s of a caller's row held per thread: rows of up to 4 * kTileSize float4s (128 floats)
// are loaded before the probe, so their latency overlaps it.
inline constexpr uint32_t kPrefetchVectors = 4;
struct RowPrefetch {
  float4 v[kPrefetchVectors];
  bool held;
};

template <bool kVec>
__device__ __forceinline__ RowPrefetch prefetch_row(const Tile& tile, const float* src,
                                                    uint32_t dim) {
  RowPrefetch p;
  p.held = kVec && dim / 4 <= kTileSize * kPrefetchVectors;
  if (kVec && p.held) {
    const auto* s4 = reinterpret_cast<const float4*>(src);
#pragma unroll
    for (uint32_t m = 0; m < kPrefetchVectors; ++m) {
      const uint32_t j = tile.thread_rank() + m * kTileSize;
      if (j < dim / 4) p.v[m] = s4[j];
    }
  }
  return p;
}

// dst = the caller's row src (from the prefetch when it holds it).
template <bool kVec>
__device__ __forceinline__ void store_row(const Tile& tile, float* dst, const float* src,
                                          const RowPrefetch& p, uint32_t dim) {
  if (kVec && p.held) {
    auto* d4 = reinterpret_cast<float4*>(dst);
#pragma unroll
    for (uint32_t m = 0; m < kPrefetchVectors; ++m) {
      const uint32_t j = tile.thread_rank() + m * kTileSize;
      if (j < dim / 4) d4[j] = p.v[m];
    }
  } else {
    copy_row<kVec, false>(tile, dst, src, dim);
  }
}

// dst += the caller's row src, element by element (from the prefetch when it holds it).
template <bool kVec>
__device__ __forceinline__ void add_row(const Tile& tile, float* dst, const float* src,
                                        const RowPrefetch& p, uint32_t dim) {
  if (kVec && p.held) {
    auto* d4 = reinterpret_cast<float4*>(dst);
#pragma unroll
    for (uint32_t m = 0; m < kPrefetchVectors; ++m) {
      const uint32_t j = tile.thread_rank() + m * kTileSize;
      if (j >= dim / 4) continue;
      float4 x = __ldcg(d4 + j);
      x.x = __fadd_rn(x.x, p.v[m].x);
      x.y = __fadd_rn(x.y, p.v[m].y);
      x.z = __fadd_rn(x.z, p.v[m].z);
      x.w = __fadd_rn(x.w, p.v[m].w);
      d4[j] = x;
    }
  } else {
    accumulate_row<kVec>(tile, dst, src, dim);
  }
}

// Applies op to batch entry i (its key already loaded). kLocked: take the bucket's lock; else
// the caller owns the bucket (grouped launch).
template <WriteOp kOp, bool kVec, bool kLocked>
__device__ void write_one(const Tile& tile, const TableView& t, const WriteArgs& a, uint64_t i,
                          uint64_t key, BlockCounts* counts) {
  const bool leader = tile.thread_rank() == 0;
  if (key >= kFirstReservedKey) {
    if (leader) atomicAdd(&counts->reserved, 1ull);
    if (kOp == WriteOp::kFindOrInsert && leader) {
      if (a.founds != nullptr) a.founds[i] = false;
      if (a.row_ptrs != nullptr) a.row_ptrs[i] = nullptr;
    }
    return;
  }
  const uint32_t dim = t.dim;
  const uint64_t hash = hash_key_bits(key);
  const uint64_t bucket = bucket_of_hash(hash, t.num_buckets);
  const uint64_t base = bucket * t.bucket_capacity;
  const bool has_given = a.scores_in != nullptr;
  const uint64_t given = has_given ? a.scores_in[i] : 0;
  uint64_t now = a.clock;
  if (a.policy == ScorePolicy::kTimestamp) now = tile.shfl(leader ? global_time_ns() : 0ull, 0);
  const float* input = stores_input(kOp) ? a.values_in + i * dim : nullptr;
  RowPrefetch pre{};
  if constexpr (stores_input(kOp)) pre = prefetch_row<kVec>(tile, input, dim);

  if constexpr (kLocked) lock_bucket(tile, t.locks + bucket);
  // Issued before the probe so the two loads overlap.
  const int32_t size = inserts(kOp) ? __ldcg(t.bucket_sizes + bucket) : 0;
  const Probe probe = probe_bucket(tile, t, bucket, key, digest8_of_hash(hash), inserts(kOp));
  const int found = probe.found;
  if (found >= 0) {
    const uint64_t slot = base + static_cast<uint64_t>(found);
    float* row = row_of(t, slot);
    if constexpr (kOp == WriteOp::kErase) {
      if (leader) {
        t.keys[slot] = kEmptyKey;
        t.digests[slot] = kEmptyDigest;
        t.bucket_sizes[bucket] = __ldcg(t.bucket_sizes + bucket) - 1;
        atomicAdd(&counts->erased, 1ull);
      }
    } else if constexpr (kOp == WriteOp::kAssignScores) {
      if (leader) t.scores[slot] = given;
    } else {
      if constexpr (kOp == WriteOp::kFindOrInsert) {
        if (a.row_ptrs != nullptr) {
          if (leader) a.row_ptrs[i] = row;
        } else {
          copy_row<kVec, true>(tile, a.values_out + i * dim, row, dim);
        }
        if (leader && a.founds != nullptr) a.founds[i] = true;
      } else if constexpr (kOp == WriteOp::kAccumOrAssign) {
        add_row<kVec>(tile, row, input, pre, dim);
      } else {
        store_row<kVec>(tile, row, input, pre, dim);
      }
      if (leader) {
        const uint64_t old = a.policy == ScorePolicy::kLfu ? __ldcg(t.scores + slot) : 0;
        t.scores[slot] = next_score(a.policy, true, old, has_given, given, now);
      }
    }
  } else if constexpr (inserts(kOp)) {
    const uint64_t new_score = next_score(a.policy, false, 0, has_given, given, now);
    int target = -1;
    bool evicting = false;
    bool defer = false;
    Victim victim{-1, 0, 0};
    if (size < static_cast<int32_t>(t.bucket_capacity)) {
      bool allowed = true;
      if (a.growable) {
        long long left = 0;
        if (leader)
          left = atomicAdd(reinterpret_cast<unsigned long long*>(&a.state->budget),
                           static_cast<unsigned long long>(-1ll));
        allowed = tile.shfl(left, 0) > 0;
      }
      if (allowed) {
        target = probe.empty;
      } else {
        defer = true;
      }
    } else if (a.growable) {
      defer = true;
    } else {
      victim = find_victim(tile, t, bucket);
      if (victim.slot >= 0 && may_evict(victim.score, new_score)) {
        target = victim.slot;
        evicting = true;
      }
    }

    if (defer) {
      if (leader) {
        const unsigned long long pos = atomicAdd(&a.state->deferred, 1ull);
        a.deferred_out[pos] = static_cast<uint32_t>(i);
      }
    } else if (target < 0) {
      // Refused: the table does not change for this key.
      if (leader) {
        atomicAdd(&counts->refused, 1ull);
        if (!a.skip_reserved) record_refusal(a.state, i, key, new_score, victim.score);
      }
      if constexpr (kOp == WriteOp::kFindOrInsert) {
        if (a.row_ptrs != nullptr) {
          if (leader) a.row_ptrs[i] = nullptr;
        } else {
          init_row(tile, a.init, key, a.values_out + i * dim, nullptr, dim);
        }
        if (leader && a.founds != nullptr) a.founds[i] = false;
      } else if constexpr (kOp == WriteOp::kInsertAndEvict) {
        emit<kVec>(tile, a, key, input, new_score, dim, false);
      }
    } else {
      const uint64_t slot = base + static_cast<uint64_t>(target);
      float* row = row_of(t, slot);
      if (evicting) {
        if (leader) atomicAdd(&counts->evictions, 1ull);
        if constexpr (kOp == WriteOp::kInsertAndEvict) {
          emit<kVec>(tile, a, victim.key, row, victim.score, dim, true);
        }
      }
      if constexpr (kOp == WriteOp::kFindOrInsert) {
        init_row(tile, a.init, key, row, a.row_ptrs != nullptr ? nullptr : a.values_out + i * dim,
                 dim);
        if (leader && a.row_ptrs != nullptr) a.row_ptrs[i] = row;
        if (leader && a.founds != nullptr) a.founds[i] = false;
      } else {
        store_row<kVec>(tile, row, input, pre, dim);
      }
      if (leader) {
        t.keys[slot] = key;
        t.digests[slot] = digest8_of_hash(hash);
        t.scores[slot] = new_score;
        if (!evicting) t.bucket_sizes[bucket] = size + 1;
      }
    }
  }
  if constexpr (kLocked) {
    unlock_bucket(tile, t.locks + bucket);
  } else {
    tile.sync();  // the tile's next key (same bucket) sees this key's writes
  }
}

// Adds a block's tallies to the table's stats and the call state (one thread).
__device__ void flush_counts(const BlockCounts& counts, const TableView& t, const WriteArgs& a) {
  if (counts.evictions) atomicAdd(&t.stats->evictions, counts.evictions);
  if (counts.refused) {
    atomicAdd(&t.stats->refused, counts.refused);
    atomicAdd(&a.state->refused, counts.refused);
  }
  if (counts.reserved) {
    atomicAdd(&t.stats->reserved_keys, counts.reserved);
    atomicAdd(&a.state->reserved, counts.reserved);
  }
  if (counts.erased) atomicAdd(&t.stats->erased, counts.erased);
}

// Key by key under bucket locks; a persistent grid strides over the batch (or subset).
template <WriteOp kOp, bool kVec>
__global__ void __launch_bounds__(kBlockThreads) locked_write_kernel(TableView t, WriteArgs a) {
  __shared__ BlockCounts counts;
  if (threadIdx.x == 0) counts = BlockCounts{0, 0, 0, 0};
  __syncthreads();
  const Tile tile = cg::tiled_partition<kTileSize>(cg::this_thread_block());
  // ERROR mode: a reserved key anywhere in the batch means nothing may change.
  const bool aborted = !a.skip_reserved && a.state->reserved_position != kNoPosition;
  if (!aborted) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kTilesPerBlock;
    const uint64_t n = a.n_device != nullptr && *a.n_device < a.n ? *a.n_device : a.n;
    for (uint64_t k = blockIdx.x * kTilesPerBlock + tile.meta_group_rank(); k < n; k += stride) {
      const uint64_t i = a.subset != nullptr ? a.subset[k] : k;
      write_one<kOp, kVec, true>(tile, t, a, i, a.keys[i], &counts);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) flush_counts(counts, t, a);
}

// A grouped launch (BucketOrder): one tile per entry; the tile at a bucket's first entry writes
// all of that bucket's entries in order, without a lock: no other tile touches the bucket.
template <WriteOp kOp, bool kVec>
__global__ void __launch_bounds__(kBlockThreads) grouped_write_kernel(TableView t, WriteArgs a) {
  __shared__ BlockCounts counts;
  if (threadIdx.x == 0) counts = BlockCounts{0, 0, 0, 0};
  __syncthreads();
  const Tile tile = cg::tiled_partition<kTileSize>(cg::this_thread_block());
  const bool aborted = !a.skip_reserved && a.state->reserved_position != kNoPosition;
  const uint64_t k = static_cast<uint64_t>(blockIdx.x) * kTilesPerBlock + tile.meta_group_rank();
  if (!aborted && k < a.n) {
    const uint32_t bucket = a.run_buckets[k];
    if (k == 0 || a.run_buckets[k - 1] != bucket) {
      for (uint64_t j = k; j < a.n && a.run_buckets[j] == bucket; ++j) {
        write_one<kOp, kVec, false>(tile, t, a, a.subset[j], a.run_keys[j], &counts);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) flush_counts(counts, t, a);
}

// Blocks that fit on the device at once for `kernel` (a persistent grid: tiles stride over the
// batch, so no block waits on a wave of slower ones).
template <class Kernel>
unsigned resident_blocks(Kernel kernel) {
  int device = 0, sms = 0, per_sm = 0;
  cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
              "cudaDeviceGetAttribute");
  cuda::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlockThreads, 0),
              "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return static_cast<unsigned>(sms * (per_sm > 0 ? per_sm : 1));
}

template <WriteOp kOp, bool kVec>
void launch_kernel(const TableView& t, const WriteArgs& a, cudaStream_t stream) {
  if (a.run_buckets != nullptr) {
    grouped_write_kernel<kOp, kVec><<<blocks_for_tiles(a.n, ~0u), kBlockThreads, 0, stream>>>(t, a);
    cuda::check(cudaGetLastError(), "grouped_write_kernel launch");
    return;
  }
  static const unsigned resident = resident_blocks(locked_write_kernel<kOp, kVec>);
  const uint64_t needed = (a.n + kTilesPerBlock - 1) / kTilesPerBlock;
  const unsigned blocks = static_cast<unsigned>(needed < resident ? needed : resident);
  locked_write_kernel<kOp, kVec><<<blocks, kBlockThreads, 0, stream>>>(t, a);
  cuda::check(cudaGetLastError(), "locked_write_kernel launch");
}

template <WriteOp kOp>
void launch_op(const TableView& t, const WriteArgs& a, bool vec, cudaStream_t stream) {
  if (vec) {
    launch_kernel<kOp, true>(t, a, stream);
  } else {
    launch_kernel<kOp, false>(t, a, stream);
  }
}

}  // namespace

void launch_write(WriteOp op, const TableView& t, const WriteArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  const bool vec = t.dim % 4 == 0 && aligned16(a.values_in) && aligned16(a.values_out) &&
                   aligned16(a.evicted_values) && aligned16(t.hbm_values) &&
                   aligned16(t.host_values);
  switch (op) {
    case WriteOp::kFindOrInsert:
      return launch_op<WriteOp::kFindOrInsert>(t, a, vec, stream);
    case WriteOp::kInsertOrAssign:
      return launch_op<WriteOp::kInsertOrAssign>(t, a, vec, stream);
    case WriteOp::kInsertAndEvict:
      return launch_op<WriteOp::kInsertAndEvict>(t, a, vec, stream);
    case WriteOp::kAssign:
      return launch_op<WriteOp::kAssign>(t, a, vec, stream);
    case WriteOp::kAssignScores:
      return launch_op<WriteOp::kAssignScores>(t, a, vec, stream);
    case WriteOp::kAccumOrAssign:
      return launch_op<WriteOp::kAccumOrAssign>(t, a, vec, stream);
    case WriteOp::kErase:
      return launch_op<WriteOp::kErase>(t, a, vec, stream);
  }
}

}  // namespace dynemb::cuda_table

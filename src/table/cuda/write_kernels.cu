// The write kernels: find_or_insert (and _given), insert_or_assign, insert_and_evict, assign,
// assign_scores, accum_or_assign and erase share one body. A tile owns the key's bucket (a
// grouped launch: the batch is sorted by bucket and one tile writes each bucket's keys in
// order; otherwise it takes the bucket's lock), probes it, then updates, inserts (empty slot,
// or the victim at max capacity), refuses, or defers the key to after a growth.
#include <algorithm>

#include "cuda/copy_joins.cuh"
#include "cuda/kernels.hpp"
#include "cuda/probe.cuh"
#include "cuda/victim.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/score.hpp"

namespace dynemb::table::cuda {
namespace {

// Per-block tallies, flushed to the table's stats and the call state once per block.
struct BlockCounts {
  unsigned long long evictions;
  unsigned long long refused;
  unsigned long long reserved;
  unsigned long long erased;
};

// The finds that insert: a stored key's row is copied out (or its address written).
constexpr bool copies_found_rows(WriteOp op) {
  return op == WriteOp::kFindOrInsert || op == WriteOp::kFindOrInsertPointers ||
         op == WriteOp::kFindOrInsertGiven;
}

// Writes (key, row, score) to position `reserved` of the insert_and_evict outputs (taken from
// the call's count by the tile's leader, which alone holds it).
template <bool kVec, uint32_t kT>
__device__ void emit(const TileOf<kT>& tile, const WriteArgs& a, unsigned long long reserved,
                     uint64_t key, const float* row, uint64_t score, uint32_t dim,
                     bool coherent_row) {
  const unsigned long long pos = tile.shfl(reserved, 0);
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

// emit for insert_and_evict's initial form: the refused key leaves with the initializer's row.
template <bool kVec, bool kPacked, uint32_t kT>
__device__ void emit_initial(const TileOf<kT>& tile, const WriteArgs& a,
                             unsigned long long reserved, uint64_t key, uint64_t score,
                             uint32_t dim) {
  const unsigned long long pos = tile.shfl(reserved, 0);
  if (tile.thread_rank() == 0) {
    a.evicted_keys[pos] = key;
    if (a.evicted_scores != nullptr) a.evicted_scores[pos] = score;
  }
  if (a.evicted_values != nullptr)
    init_row<kVec, kPacked>(tile, a.init, key, a.evicted_values + pos * dim, nullptr, dim);
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

// The ops that write an initializer's row into new slots (find_or_insert also copies it out;
// insert_and_evict's initial form into every key's slot).
constexpr bool initializes_rows(WriteOp op) {
  return op == WriteOp::kFindOrInsert || op == WriteOp::kFindOrInsertPointers ||
         op == WriteOp::kInsertAndEvictInitial;
}

// insert_and_evict and its initial form: every key's row written, what leaves emitted.
constexpr bool emits_evictions(WriteOp op) {
  return op == WriteOp::kInsertAndEvict || op == WriteOp::kInsertAndEvictInitial;
}

constexpr bool stores_input(WriteOp op) {
  return op == WriteOp::kInsertOrAssign || op == WriteOp::kInsertAndEvict ||
         op == WriteOp::kAssign || op == WriteOp::kAccumOrAssign ||
         op == WriteOp::kFindOrInsertGiven;
}

// Whether a write takes its bucket's lock: every op of a locked launch but assign_scores.
constexpr bool takes_lock(WriteOp op, bool locked) {
  return locked && op != WriteOp::kAssignScores;
}

// The ops whose copies may take the result of the copy writing their key (CopyJoins): the
// finds that insert (a copy finds the key the owner found or inserted) and the plain stores (a
// copy's row is one the owner's overwrites).
constexpr bool joins_copies(WriteOp op) {
  return copies_found_rows(op) || op == WriteOp::kInsertOrAssign || op == WriteOp::kAssign;
}

// A copy's outputs from its owner's (batch position `owner`), which published them: the row or
// address, founds = true. The stores have none.
// (Arguments by value: a non-inlined callee given the kernel's WriteArgs by reference would have
// them copied to local memory.)
template <bool kVec, uint32_t kT>
__device__ __noinline__ void take_owner_result(TileOf<kT> tile, float* values_out, float** row_ptrs,
                                               bool* founds, uint64_t i, uint64_t owner,
                                               uint32_t dim) {
  const bool leader = tile.thread_rank() == 0;
  if (row_ptrs != nullptr) {
    if (leader) {
      const auto bits = __ldcg(reinterpret_cast<const unsigned long long*>(row_ptrs + owner));
      row_ptrs[i] = reinterpret_cast<float*>(bits);
    }
  } else {
    copy_row<kVec, true>(tile, values_out + i * dim, values_out + owner * dim, dim);
  }
  if (leader && founds != nullptr) founds[i] = true;
}

// Takes the bucket's lock for a write of batch entry i, or (a.joins set, the lock taken) joins
// the copy of the key that claimed it (lock_or_join). Returns whether the tile holds the lock
// (then *claimed is the entry it claimed + 1, or 0); otherwise the entry is done: its owner's
// result was taken, or it was deferred as its owner was.
template <WriteOp kOp, bool kVec, bool kJoins, uint32_t kT>
__device__ __forceinline__ bool lock_or_take_owner(const TileOf<kT>& tile, const TableView& t,
                                                   const WriteArgs& a, uint64_t bucket, uint64_t i,
                                                   uint64_t key, uint64_t hash, uint32_t* claimed) {
  *claimed = 0;
  if constexpr (!joins_copies(kOp) || !kJoins) {
    lock_bucket(tile, t.locks + bucket);
    return true;
  }
  if (a.joins.tags == nullptr) {
    lock_bucket(tile, t.locks + bucket);
    return true;
  }
  JoinOutcome r{kJoinHoldsLock, 0};
  if (tile.thread_rank() == 0 && !try_lock_bucket(t.locks + bucket))
    r = lock_or_join(t.locks + bucket, a.joins, a.state, key, hash, static_cast<uint32_t>(i));
  r.kind = tile.shfl(r.kind, 0);
  r.value = tile.shfl(r.value, 0);
  if (r.kind == kJoinHoldsLock) {
    *claimed = r.value;
    return true;
  }
  if (r.kind == kJoinTakesOwner) {
    if constexpr (copies_found_rows(kOp))
      take_owner_result<kVec>(tile, a.values_out, a.row_ptrs, a.founds, i, r.value, t.dim);
  } else if (tile.thread_rank() == 0) {
    const unsigned long long pos = atomicAdd(&a.state->deferred, 1ull);
    a.deferred_out[pos] = static_cast<uint32_t>(i);
  }
  return false;
}

// float4s of a caller's row held per thread: a row of up to kHeld * kT float4s is
// loaded before the probe, so its latency overlaps the probe's. kHeld is chosen per launch from
// the row's width and the tile's (1, 2 or 4; 0: not held), so narrow rows do not pay registers,
// and occupancy, for wide ones.
template <uint32_t kHeld>
struct RowPrefetch {
  float4 v[kHeld > 0 ? kHeld : 1];
  bool held;
};

// Calls f(m, j) for each float4 j = rank + m * kT (m < kHeld) of a dim-float row that the
// tile's thread holds in a RowPrefetch.
template <uint32_t kHeld, uint32_t kT, class F>
__device__ __forceinline__ void for_held(const TileOf<kT>& tile, uint32_t dim, const F& f) {
#pragma unroll
  for (uint32_t m = 0; m < kHeld; ++m) {
    const uint32_t j = tile.thread_rank() + m * kT;
    if (j < dim / 4) f(m, j);
  }
}

template <bool kVec, uint32_t kHeld, uint32_t kT>
__device__ __forceinline__ RowPrefetch<kHeld> prefetch_row(const TileOf<kT>& tile, const float* src,
                                                           uint32_t dim) {
  RowPrefetch<kHeld> p;
  p.held = kVec && kHeld > 0 && dim / 4 <= kT * kHeld;
  if constexpr (kVec && kHeld > 0) {
    if (p.held) {
      const auto* s4 = reinterpret_cast<const float4*>(src);
      for_held<kHeld>(tile, dim, [&](uint32_t m, uint32_t j) { p.v[m] = s4[j]; });
    }
  }
  return p;
}

// dst = the caller's row src (from the prefetch when it holds it).
template <bool kVec, uint32_t kHeld, uint32_t kT>
__device__ __forceinline__ void store_row(const TileOf<kT>& tile, float* dst, const float* src,
                                          const RowPrefetch<kHeld>& p, uint32_t dim) {
  if constexpr (kVec && kHeld > 0) {
    if (p.held) {
      auto* d4 = reinterpret_cast<float4*>(dst);
      for_held<kHeld>(tile, dim, [&](uint32_t m, uint32_t j) { d4[j] = p.v[m]; });
      return;
    }
  }
  copy_row<kVec, false>(tile, dst, src, dim);
}

// dst += the caller's row src, element by element (from the prefetch when it holds it).
template <bool kVec, uint32_t kHeld, uint32_t kT>
__device__ __forceinline__ void add_row(const TileOf<kT>& tile, float* dst, const float* src,
                                        const RowPrefetch<kHeld>& p, uint32_t dim) {
  if constexpr (kVec && kHeld > 0) {
    if (p.held) {
      auto* d4 = reinterpret_cast<float4*>(dst);
      for_held<kHeld>(tile, dim, [&](uint32_t m, uint32_t j) {
        float4 x = __ldcg(d4 + j);
        x.x = __fadd_rn(x.x, p.v[m].x);
        x.y = __fadd_rn(x.y, p.v[m].y);
        x.z = __fadd_rn(x.z, p.v[m].z);
        x.w = __fadd_rn(x.w, p.v[m].w);
        d4[j] = x;
      });
      return;
    }
  }
  accumulate_row<kVec>(tile, dst, src, dim);
}

// find_or_insert_pointers' look for a stored key without the lock, by a group of kA threads: a
// stored key gets its address, its `founds` flag and its score touch (an atomic: copies of a
// key, and writers of the same kernel, touch it together), a reserved key nullptr and false.
// Returns whether the key is done; a key not found goes on to the locked write, which probes
// again (a copy of the key may have inserted it meanwhile). What this probe can miss or find
// stale (a row another key of the call evicts) is what the locked probe and the call's address
// refresh already handle (docs/cuda_table.md).
template <uint32_t kA>
__device__ __forceinline__ bool find_pointer_lock_free(const TileOf<kA>& group, const TableView& t,
                                                       const WriteArgs& a, uint64_t i, uint64_t key,
                                                       BlockCounts* counts) {
  const bool leader = group.thread_rank() == 0;
  if (key >= kFirstReservedKey) {
    if (leader) {
      atomicAdd(&counts->reserved, 1ull);
      a.row_ptrs[i] = nullptr;
      if (a.founds != nullptr) a.founds[i] = false;
    }
    return true;
  }
  const uint64_t hash = hash_key_bits(key);
  const uint64_t bucket = bucket_of_hash(hash, t.num_buckets);
  int hit;
  if constexpr (kA == 1) {
    hit = find_in_bucket_alone(t, bucket, key, slot_digest_of_hash(hash));
  } else {
    hit = find_in_bucket<false>(group, t, bucket, key, slot_digest_of_hash(hash));
  }
  if (hit < 0) return false;
  if (leader) {
    const uint64_t slot = bucket * t.bucket_capacity + static_cast<uint64_t>(hit);
    a.row_ptrs[i] = row_of(t, slot);
    if (a.founds != nullptr) a.founds[i] = true;
    const bool has_given = a.scores_in != nullptr;
    const uint64_t given = has_given ? a.scores_in[i] : 0;
    const uint64_t now = a.policy == ScorePolicy::kTimestamp ? global_time_ns() : a.clock;
    touch_score(t.scores + slot, a.policy, has_given, given, now);
  }
  return true;
}

// Applies op to batch entry i (its key already loaded). kLocked: take the bucket's lock; else
// the caller owns the bucket (grouped launch). kPacked: new rows get a 16-bit initializer's
// packed row (init_row).
// lock_free_first (find_or_insert_pointers): find_pointer_lock_free first, the lock only for a
// key it did not find.
template <WriteOp kOp, bool kVec, uint32_t kHeld, bool kLocked, uint32_t kT, bool kPacked,
          bool kJoins>
__device__ void write_one(const TileOf<kT>& tile, const TableView& t, const WriteArgs& a,
                          uint64_t i, uint64_t key, BlockCounts* counts, bool lock_free_first) {
  const bool leader = tile.thread_rank() == 0;
  if (key >= kFirstReservedKey) {
    if (leader) atomicAdd(&counts->reserved, 1ull);
    if (copies_found_rows(kOp) && leader) {
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
  const float* input = stores_input(kOp) ? a.values_in + i * dim : nullptr;
  RowPrefetch<kHeld> pre{};
  if constexpr (stores_input(kOp)) pre = prefetch_row<kVec, kHeld>(tile, input, dim);

  if constexpr (kOp == WriteOp::kFindOrInsertPointers) {
    if (lock_free_first && find_pointer_lock_free(tile, t, a, i, key, counts)) return;
  }

  // assign and assign_scores never change which keys are stored, so they probe without the
  // lock and a missing key takes no lock at all; a found key's row is written under its bucket's
  // lock (copies of one key take turns); assign_scores' one 8-byte store needs none.
  constexpr bool kKeysFixed = kOp == WriteOp::kAssign || kOp == WriteOp::kAssignScores;
  Probe probe{-1, -1};
  uint32_t claimed = 0;  // the join entry this tile claimed + 1 (CopyJoins), 0: none
  if constexpr (kKeysFixed) {
    probe.found = find_in_bucket<false>(tile, t, bucket, key, slot_digest_of_hash(hash));
    if (probe.found < 0) return;
    if constexpr (takes_lock(kOp, kLocked)) {
      if (!lock_or_take_owner<kOp, kVec, kJoins>(tile, t, a, bucket, i, key, hash, &claimed))
        return;
    }
  } else {
    if constexpr (kLocked) {
      prefetch_bucket_l2(tile, t, bucket);
      if (!lock_or_take_owner<kOp, kVec, kJoins>(tile, t, a, bucket, i, key, hash, &claimed))
        return;
    }
    // find_or_insert asks L2 for the row it will copy out as the key is confirmed, for rows of
    // a 128-byte line or more (shorter ones measured slower with it).
    const bool prefetch_rows = copies_found_rows(kOp) && a.row_ptrs == nullptr && dim >= 32;
    probe = probe_bucket(tile, t, bucket, key, slot_digest_of_hash(hash), op_inserts(kOp),
                         prefetch_rows);
  }
  // Read once the bucket is held, so a bucket's timestamps are written in time order (the
  // score bounds rely on it, victim.cuh).
  uint64_t now = a.clock;
  if (a.policy == ScorePolicy::kTimestamp) now = tile.shfl(leader ? global_time_ns() : 0ull, 0);
  const int found = probe.found;
  uint32_t outcome = kJoinStored;  // what a claimer publishes (CopyJoins)
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
      if constexpr (kOp == WriteOp::kFindOrInsertPointers) {
        if (leader) a.row_ptrs[i] = row;
        if (leader && a.founds != nullptr) a.founds[i] = true;
      } else if constexpr (copies_found_rows(kOp)) {
        if (a.row_ptrs != nullptr) {
          if (leader) a.row_ptrs[i] = row;
        } else {
          copy_row<kVec, true>(tile, a.values_out + i * dim, row, dim);
        }
        if (leader && a.founds != nullptr) a.founds[i] = true;
      } else if constexpr (kOp == WriteOp::kAccumOrAssign) {
        add_row<kVec, kHeld>(tile, row, input, pre, dim);
      } else if constexpr (kOp == WriteOp::kInsertAndEvictInitial) {
        init_row<kVec, kPacked>(tile, a.init, key, row, nullptr, dim);
      } else {
        store_row<kVec, kHeld>(tile, row, input, pre, dim);
      }
      if (leader) {
        const uint64_t old = a.policy == ScorePolicy::kLfu ? __ldcg(t.scores + slot) : 0;
        t.scores[slot] = next_score(a.policy, true, old, has_given, given, now);
      }
    }
  } else if constexpr (op_inserts(kOp)) {
    uint64_t new_score = next_score(a.policy, false, 0, has_given, given, now);
    int target = -1;
    bool evicting = false;
    bool defer = false;
    Victim victim{-1, 0, 0};
    unsigned long long reserved = 0;
    if (probe.empty >= 0) {
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
      // A full bucket's key always emits a row under insert_and_evict (the victim's, or its own
      // when refused): its output position is taken now, so the count's round trip overlaps
      // the victim search.
      if (emits_evictions(kOp) && leader) reserved = atomicAdd(&a.state->emitted, 1ull);
      if (t.score_bounds != nullptr) {
        const auto bounded = find_victim_bounded(tile, t, bucket);
        victim = bounded.victim;
        evicting = may_evict(victim.score, new_score);
        store_score_bounds(tile, t, bucket, bounded);
      } else {
        victim = find_victim(tile, t, bucket);
        evicting = victim.slot >= 0 && may_evict(victim.score, new_score);
      }
      if constexpr (kOp == WriteOp::kFindOrInsertPointers) {
        // The lock-free touches of this kernel take no lock: between the timer read above and
        // the victim search they may have moved every score of the bucket past `now`. No
        // sequential order refuses a timer-scored key there (each stored timestamp was read
        // earlier), so the key takes the time of the search: a touch read its timestamp before
        // storing it, so a timer read after the search is at least every score the search saw.
        // Only scores above any timer reading (assign_scores) refuse the key then.
        if (!evicting && victim.slot >= 0 && a.policy == ScorePolicy::kTimestamp) {
          new_score = tile.shfl(leader ? global_time_ns() : 0ull, 0);
          evicting = may_evict(victim.score, new_score);
        }
      }
      if (evicting) target = victim.slot;
    }

    if (defer) {
      outcome = kJoinDeferred;
      if (leader) {
        const unsigned long long pos = atomicAdd(&a.state->deferred, 1ull);
        a.deferred_out[pos] = static_cast<uint32_t>(i);
      }
    } else if (target < 0) {
      // Refused: the table does not change for this key.
      outcome = kJoinOther;
      if (leader) {
        atomicAdd(&counts->refused, 1ull);
        if (!a.skip_reserved) record_refusal(a.state, i, key, new_score, victim.score);
      }
      if constexpr (kOp == WriteOp::kFindOrInsertPointers) {
        if (leader) a.row_ptrs[i] = nullptr;
        if (leader && a.founds != nullptr) a.founds[i] = false;
      } else if constexpr (kOp == WriteOp::kFindOrInsert) {
        if (a.row_ptrs != nullptr) {
          if (leader) a.row_ptrs[i] = nullptr;
        } else {
          init_row<kVec, kPacked>(tile, a.init, key, a.values_out + i * dim, nullptr, dim);
        }
        if (leader && a.founds != nullptr) a.founds[i] = false;
      } else if constexpr (kOp == WriteOp::kFindOrInsertGiven) {
        if (leader && a.founds != nullptr) a.founds[i] = false;
      } else if constexpr (kOp == WriteOp::kInsertAndEvict) {
        emit<kVec>(tile, a, reserved, key, input, new_score, dim, false);
      } else if constexpr (kOp == WriteOp::kInsertAndEvictInitial) {
        emit_initial<kVec, kPacked>(tile, a, reserved, key, new_score, dim);
      }
    } else {
      const uint64_t slot = base + static_cast<uint64_t>(target);
      float* row = row_of(t, slot);
      if (evicting) {
        if (leader) atomicAdd(&counts->evictions, 1ull);
        if constexpr (emits_evictions(kOp)) {
          emit<kVec>(tile, a, reserved, victim.key, row, victim.score, dim, true);
        }
      }
      if constexpr (kOp == WriteOp::kFindOrInsertPointers) {
        if (a.init_new_rows) init_row<kVec, kPacked>(tile, a.init, key, row, nullptr, dim);
        if (leader) a.row_ptrs[i] = row;
        if (leader && a.founds != nullptr) a.founds[i] = false;
      } else if constexpr (kOp == WriteOp::kFindOrInsert) {
        init_row<kVec, kPacked>(tile, a.init, key, row,
                                a.row_ptrs != nullptr ? nullptr : a.values_out + i * dim, dim);
        if (leader && a.row_ptrs != nullptr) a.row_ptrs[i] = row;
        if (leader && a.founds != nullptr) a.founds[i] = false;
      } else if constexpr (kOp == WriteOp::kInsertAndEvictInitial) {
        init_row<kVec, kPacked>(tile, a.init, key, row, nullptr, dim);
      } else {
        store_row<kVec, kHeld>(tile, row, input, pre, dim);
        if (kOp == WriteOp::kFindOrInsertGiven && leader && a.founds != nullptr)
          a.founds[i] = false;
      }
      if (leader) {
        t.keys[slot] = key;
        t.digests[slot] = slot_digest_of_hash(hash);
        t.scores[slot] = new_score;
        if (!evicting)
          t.bucket_sizes[bucket] = static_cast<int32_t>(t.bucket_capacity - probe.empties + 1);
      }
    }
  }
  if constexpr (takes_lock(kOp, kLocked)) {
    unlock_bucket(tile, t.locks + bucket);
    if constexpr (joins_copies(kOp) && kJoins) {
      if (claimed != 0)
        publish_join(tile, a.joins, a.state, claimed - 1, outcome, static_cast<uint32_t>(i));
    }
  } else {
    tile.sync();  // the tile's next key (same bucket) sees this key's writes
  }
}

// Adds a block's tallies to the table's stats and the call state (one thread).
__device__ void flush_counts(const BlockCounts& counts, const TableView& t, const WriteArgs& a) {
  if (counts.evictions) {
    atomicAdd(&t.stats->evictions, counts.evictions);
    atomicAdd(&a.state->evictions, counts.evictions);
  }
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

// Threads per block of the locked write kernel. A block keeps its place on the SM until its
// slowest key is done (a key waiting for a lock holds up the block's other keys' places).
inline constexpr uint32_t kLockedBlockThreads = 64;

// Blocks per SM a locked write kernel asks the compiler to fit (0: its own choice):
// find_or_insert at 36 warps (56 registers; 70 by its own choice on 4-thread tiles, and at 40
// warps' 48 it spills and is 2-16% slower; docs/cuda_table.md). The other writes do best at
// their own choice.
constexpr int min_blocks(WriteOp op) {
  return op == WriteOp::kFindOrInsert || op == WriteOp::kFindOrInsertPointers
             ? 36 * 32 / kLockedBlockThreads
             : 0;
}

// Key by key under bucket locks, one kT-thread tile per key (striding over the rest of a batch
// larger than the grid).
template <WriteOp kOp, bool kVec, uint32_t kHeld, uint32_t kT, bool kPacked, bool kJoins>
__global__ void __launch_bounds__(kLockedBlockThreads, min_blocks(kOp))
    locked_write_kernel(TableView t, WriteArgs a) {
  constexpr uint32_t kTilesPerBlock = kLockedBlockThreads / kT;
  __shared__ BlockCounts counts;
  if (threadIdx.x == 0) counts = BlockCounts{};
  __syncthreads();
  const TileOf<kT> tile = cg::tiled_partition<kT>(cg::this_thread_block());
  // ERROR mode: a reserved key anywhere in the batch means nothing may change.
  const bool aborted = !a.skip_reserved && a.state->reserved_position != kNoPosition;
  if (!aborted) {
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kTilesPerBlock;
    const uint64_t n = a.n_device != nullptr && *a.n_device < a.n ? *a.n_device : a.n;
    for (uint64_t k = blockIdx.x * kTilesPerBlock + tile.meta_group_rank(); k < n; k += stride) {
      const uint64_t i = a.subset != nullptr ? a.subset[k] : k;
      write_one<kOp, kVec, kHeld, true, kT, kPacked, kJoins>(tile, t, a, i, a.keys[i], &counts,
                                                             a.lock_free_first);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) flush_counts(counts, t, a);
}

// find_or_insert_pointers with the lock-free look first, a warp at a time: each of the warp's 32
// keys is looked for by one thread (four to eight times the keys in flight of a tile a key); then
// the keys not found take the bucket locks kT threads a key, 32 / kT of them at a time, the warp
// handing each tile its next key. Compiled for 16 blocks of 64 threads a SM (64 registers; on an
// H200 at dim 64, 12 blocks (72, no spills) read 2.38 / 1.62 B-KV/s at λ 0.5 / 1 and 18 blocks
// (56) 2.23 / 1.49, against 2.42-2.55 / 1.68-1.69).
inline constexpr int kPointerKernelBlocks = 16;
template <bool kVec, uint32_t kT, bool kPacked>
__global__ void __launch_bounds__(kLockedBlockThreads, kPointerKernelBlocks)
    pointer_write_kernel(TableView t, WriteArgs a) {
  constexpr uint32_t kTilesPerWarp = 32 / kT;
  constexpr uint32_t kWarpsPerBlock = kLockedBlockThreads / 32;
  __shared__ BlockCounts counts;
  if (threadIdx.x == 0) counts = BlockCounts{};
  __syncthreads();
  const auto block = cg::this_thread_block();
  const TileOf<1> alone = cg::tiled_partition<1>(block);
  const TileOf<kT> tile = cg::tiled_partition<kT>(block);
  const uint32_t lane = threadIdx.x % 32;
  const bool aborted = !a.skip_reserved && a.state->reserved_position != kNoPosition;
  if (!aborted) {
    const uint64_t n = a.n_device != nullptr && *a.n_device < a.n ? *a.n_device : a.n;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarpsPerBlock * 32;
    for (uint64_t first =
             (static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * 32;
         first < n; first += stride) {
      bool missed = false;
      if (first + lane < n) {
        const uint64_t i = a.subset != nullptr ? a.subset[first + lane] : first + lane;
        missed = !find_pointer_lock_free(alone, t, a, i, a.keys[i], &counts);
      }
      // One bit a missed key; every lane holds the same mask. A tile reads its key again rather
      // than have it shuffled over: fewer registers live across the locked write.
      uint32_t misses = __ballot_sync(~0u, missed);
      while (misses != 0) {
        // Tile r of the warp takes the r-th missed key of this round.
        uint32_t mine = misses;
        for (uint32_t r = 0; r < lane / kT && mine != 0; ++r) mine &= mine - 1;
        if (mine != 0) {
          const uint64_t k = first + static_cast<uint32_t>(__ffs(mine) - 1);
          const uint64_t i = a.subset != nullptr ? a.subset[k] : k;
          write_one<WriteOp::kFindOrInsertPointers, kVec, 0, true, kT, kPacked, true>(
              tile, t, a, i, a.keys[i], &counts, false);
        }
        for (uint32_t r = 0; r < kTilesPerWarp && misses != 0; ++r) misses &= misses - 1;
        __syncwarp();
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) flush_counts(counts, t, a);
}

// A grouped launch (BucketOrder): one tile per entry; the tile at a bucket's first entry writes
// all of that bucket's entries in order, without a lock: no other tile touches the bucket.
template <WriteOp kOp, bool kVec, uint32_t kHeld, bool kPacked>
__global__ void __launch_bounds__(kBlockThreads) grouped_write_kernel(TableView t, WriteArgs a) {
  __shared__ BlockCounts counts;
  if (threadIdx.x == 0) counts = BlockCounts{};
  __syncthreads();
  const Tile tile = cg::tiled_partition<kTileSize>(cg::this_thread_block());
  const bool aborted = !a.skip_reserved && a.state->reserved_position != kNoPosition;
  const uint64_t k = static_cast<uint64_t>(blockIdx.x) * kTilesPerBlock + tile.meta_group_rank();
  if (!aborted && k < a.n) {
    const uint32_t bucket = a.run_buckets[k];
    if (k == 0 || a.run_buckets[k - 1] != bucket) {
      for (uint64_t j = k; j < a.n && a.run_buckets[j] == bucket; ++j) {
        write_one<kOp, kVec, kHeld, false, kTileSize, kPacked, false>(
            tile, t, a, a.subset[j], a.run_keys[j], &counts, false);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) flush_counts(counts, t, a);
}

// Blocks of the locked kernel for a batch of n keys: one tile per key (at most 2^31 - 1
// blocks). A subset whose length only the device knows (a.n_device, at most n) gets at most two
// waves of blocks that stride over it: sized for n, the grid's blocks would mostly start only
// to find no key (the 13.1M-lookup training forward, whose lookups send only missing keys here,
// went from 2.50 to 2.81 ms when 64-thread blocks were sized for n).
unsigned locked_blocks(uint64_t n, uint32_t tiles_per_block, bool length_on_device,
                       uint32_t multiprocessors) {
  uint64_t blocks = (n + tiles_per_block - 1) / tiles_per_block;
  if (length_on_device) {
    const uint64_t two_waves = uint64_t{2} * multiprocessors * (2048 / kLockedBlockThreads);
    blocks = blocks < two_waves ? blocks : two_waves;
  }
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks < 0x7FFFFFFFull ? blocks : 0x7FFFFFFFull));
}

// Unused dynamic shared memory per block that lets only enough blocks of `kernel` share an SM for
// about `keys` tiles of the launch to be resident at once (0: no cap needed or asked).
template <class Kernel>
size_t residency_bytes(Kernel* kernel, uint32_t keys, uint32_t tiles_per_block,
                       uint32_t multiprocessors) {
  if (keys == 0 || multiprocessors == 0) return 0;
  const uint32_t blocks_per_sm = std::max(1u, keys / (tiles_per_block * multiprocessors));
  if (blocks_per_sm >= 2048 / kLockedBlockThreads) return 0;  // the thread limit caps it anyway
  int device = 0, per_sm = 0, reserved = 0, per_block = 0;
  core::cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  core::cuda::check(
      cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
      "cudaDeviceGetAttribute (shared memory per block)");
  core::cuda::check(
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
      "cudaDeviceGetAttribute (shared memory per SM)");
  core::cuda::check(
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device),
      "cudaDeviceGetAttribute (reserved shared memory per block)");
  cudaFuncAttributes attributes{};
  core::cuda::check(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
  // Always the same limit (the most a block may ask for), so launches from other threads with
  // other caps never find it lowered under them.
  const int most = per_block - static_cast<int>(attributes.sharedSizeBytes);
  const long bytes = std::min<long>(most, static_cast<long>(per_sm / blocks_per_sm) - reserved -
                                              static_cast<long>(attributes.sharedSizeBytes));
  if (bytes <= 0) return 0;
  core::cuda::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most),
                    "cudaFuncSetAttribute (dynamic shared memory)");
  return static_cast<size_t>(bytes);
}

// Whether a find_or_insert_pointers launch runs pointer_write_kernel: its keys are looked for
// without the lock first, no residency cap is asked, and it is not an ordered hybrid launch
// (there the locked kernel was faster: 0.218 against 0.184 B-KV/s on an H100 at dim 64).
inline bool runs_pointer_kernel(const WriteArgs& a) {
  return a.lock_free_first && a.keys_in_flight == 0 && !a.host_order;
}

// Launches pointer_write_kernel over the batch (or subset): 32 keys a warp.
template <bool kVec, uint32_t kT, bool kPacked>
void launch_pointer_kernel(const TableView& t, const WriteArgs& a, uint32_t multiprocessors,
                           cudaStream_t stream) {
  constexpr uint32_t kKeysPerBlock = kLockedBlockThreads;
  const unsigned blocks = locked_blocks(a.n, kKeysPerBlock, a.n_device != nullptr, multiprocessors);
  auto* kernel = &pointer_write_kernel<kVec, kT, kPacked>;
  const size_t held = residency_bytes(kernel, a.keys_in_flight, kKeysPerBlock, multiprocessors);
  kernel<<<blocks, kLockedBlockThreads, held, stream>>>(t, a);
  core::cuda::check(cudaGetLastError(), "pointer_write_kernel launch");
}

// Launches a locked_write_kernel instance over `blocks` blocks, with the residency cap's
// shared memory when one is asked.
template <auto kKernel, uint32_t kT>
void launch_locked(const TableView& t, const WriteArgs& a, unsigned blocks,
                   uint32_t multiprocessors, cudaStream_t stream) {
  const size_t held =
      residency_bytes(kKernel, a.keys_in_flight, kLockedBlockThreads / kT, multiprocessors);
  kKernel<<<blocks, kLockedBlockThreads, held, stream>>>(t, a);
  core::cuda::check(cudaGetLastError(), "locked_write_kernel launch");
}

// A grouped launch always runs 8-thread tiles (a kHeld chosen for 4-thread tiles covers its
// rows too).
template <WriteOp kOp, bool kVec, uint32_t kHeld, uint32_t kT, bool kPacked>
void launch_kernel(const TableView& t, const WriteArgs& a, uint32_t multiprocessors,
                   cudaStream_t stream) {
  if (a.run_buckets != nullptr) {
    grouped_write_kernel<kOp, kVec, kHeld, kPacked>
        <<<blocks_for_tiles(a.n, ~0u), kBlockThreads, 0, stream>>>(t, a);
    core::cuda::check(cudaGetLastError(), "grouped_write_kernel launch");
    return;
  }
  // One tile per key: the block scheduler hands finished blocks' places to new ones, where a
  // persistent grid gave each tile a fixed share of the batch (ncu, assign at dim 8: 514 µs
  // persistent, 323 µs one tile per key).
  const unsigned blocks =
      locked_blocks(a.n, kLockedBlockThreads / kT, a.n_device != nullptr, multiprocessors);
  if constexpr (kOp == WriteOp::kFindOrInsertPointers) {
    // A launch with a residency cap or over host rows in address order keeps the locked kernel
    // (runs_pointer_kernel).
    if constexpr (kT == 8) {  // launch_op sends pointer_write_kernel's launches here
      if (runs_pointer_kernel(a))
        return launch_pointer_kernel<kVec, kT, kPacked>(t, a, multiprocessors, stream);
    }
  }
  // Joins are a kernel of their own: their code beside the plain lock changed the registers of
  // every locked write (insert_or_assign 80 -> 72, assign 46 -> 56 with spills).
  if constexpr (joins_copies(kOp)) {
    if (a.joins.tags != nullptr)
      return launch_locked<locked_write_kernel<kOp, kVec, kHeld, kT, kPacked, true>, kT>(
          t, a, blocks, multiprocessors, stream);
  }
  launch_locked<locked_write_kernel<kOp, kVec, kHeld, kT, kPacked, false>, kT>(
      t, a, blocks, multiprocessors, stream);
}

// Whether an op stores the caller's row for every key it is given, where assign stores it only
// for the stored keys and find_or_insert_given only for the new ones.
constexpr bool stores_input_for_every_key(WriteOp op) {
  return stores_input(op) && op != WriteOp::kAssign && op != WriteOp::kFindOrInsertGiven;
}

// float4s per thread a launch holds of each caller row (see RowPrefetch): the fewest that
// cover the row, 0 when the op stores no caller row or the row is wider than 4 float4s a thread.
// The ops that store the row for some keys only hold one float4 a thread at most: holding two
// cost find_or_insert_given 5-9% and assign 3-8% at dims 32 and 64 (docs/cuda_table.md).
template <WriteOp kOp, uint32_t kT>
void launch_tiled(const TableView& t, const WriteArgs& a, bool vec, uint32_t multiprocessors,
                  cudaStream_t stream) {
  if constexpr (initializes_rows(kOp)) {
    // 16-bit rows: kernels of their own (init_row's kPacked); never vectors of caller rows.
    if (a.init.value_type != ValueType::kFloat32) {
      if (vec) return launch_kernel<kOp, true, 0, kT, true>(t, a, multiprocessors, stream);
      return launch_kernel<kOp, false, 0, kT, true>(t, a, multiprocessors, stream);
    }
  }
  if (!vec) return launch_kernel<kOp, false, 0, kT, false>(t, a, multiprocessors, stream);
  if constexpr (stores_input(kOp)) {
    const uint32_t per_thread = (t.dim / 4 + kT - 1) / kT;
    if (per_thread <= 1)
      return launch_kernel<kOp, true, 1, kT, false>(t, a, multiprocessors, stream);
    if constexpr (stores_input_for_every_key(kOp)) {
      if (per_thread <= 2)
        return launch_kernel<kOp, true, 2, kT, false>(t, a, multiprocessors, stream);
      if (per_thread <= 4)
        return launch_kernel<kOp, true, 4, kT, false>(t, a, multiprocessors, stream);
    }
  }
  launch_kernel<kOp, true, 0, kT, false>(t, a, multiprocessors, stream);
}

// Tiles of 4 threads for rows of up to 64 floats (find_or_insert, find_or_insert_given and
// accum_or_assign, which read the stored row too: 32; find_or_insert_pointers copies none), else
// 8: twice the keys in flight per warp, where a row's copy is short enough for 4 threads. A
// launch over host rows in address order takes 8-thread tiles for rows of more than 32 floats:
// a warp's store then reaches 4 rows, not 8 (on an H100 at dim 64: insert_or_assign +1.6%,
// assign +3.5%; docs/cuda_table.md, "Hybrid tables").
template <WriteOp kOp>
void launch_op(const TableView& t, const WriteArgs& a, bool vec, uint32_t multiprocessors,
               cudaStream_t stream) {
  const bool reads_stored_row = (copies_found_rows(kOp) && kOp != WriteOp::kFindOrInsertPointers) ||
                                kOp == WriteOp::kAccumOrAssign;
  const uint32_t widest = reads_stored_row ? 32 : 64;
  if constexpr (kOp == WriteOp::kFindOrInsertPointers) {
    // pointer_write_kernel inserts on 8-thread tiles at every dim: on an H200 at dim 64 its
    // 4-thread form (64 registers and 110-146 bytes of spills, or 80 registers at 12 blocks a
    // SM) read 2.23-2.26 / 1.45-1.49 B-KV/s at λ 0.5 / 1 against 2.55 / 1.68 on 8 threads.
    if (runs_pointer_kernel(a)) return launch_tiled<kOp, 8>(t, a, vec, multiprocessors, stream);
  }
  if (a.host_order && t.dim > 32) return launch_tiled<kOp, 8>(t, a, vec, multiprocessors, stream);
  if (t.dim <= widest) return launch_tiled<kOp, 4>(t, a, vec, multiprocessors, stream);
  launch_tiled<kOp, 8>(t, a, vec, multiprocessors, stream);
}

}  // namespace

void launch_write(WriteOp op, const TableView& t, const WriteArgs& a, uint32_t multiprocessors,
                  cudaStream_t stream) {
  if (a.n == 0) return;
  const bool vec = t.dim % 4 == 0 && aligned16(a.values_in) && aligned16(a.values_out) &&
                   aligned16(a.evicted_values) && aligned16(t.hbm_values) &&
                   aligned16(t.host_values);
  switch (op) {
    case WriteOp::kFindOrInsert:
      return launch_op<WriteOp::kFindOrInsert>(t, a, vec, multiprocessors, stream);
    case WriteOp::kFindOrInsertPointers:
      return launch_op<WriteOp::kFindOrInsertPointers>(t, a, vec, multiprocessors, stream);
    case WriteOp::kFindOrInsertGiven:
      return launch_op<WriteOp::kFindOrInsertGiven>(t, a, vec, multiprocessors, stream);
    case WriteOp::kInsertOrAssign:
      return launch_op<WriteOp::kInsertOrAssign>(t, a, vec, multiprocessors, stream);
    case WriteOp::kInsertAndEvict:
      return launch_op<WriteOp::kInsertAndEvict>(t, a, vec, multiprocessors, stream);
    case WriteOp::kInsertAndEvictInitial:
      return launch_op<WriteOp::kInsertAndEvictInitial>(t, a, vec, multiprocessors, stream);
    case WriteOp::kAssign:
      return launch_op<WriteOp::kAssign>(t, a, vec, multiprocessors, stream);
    case WriteOp::kAssignScores:
      return launch_op<WriteOp::kAssignScores>(t, a, vec, multiprocessors, stream);
    case WriteOp::kAccumOrAssign:
      return launch_op<WriteOp::kAccumOrAssign>(t, a, vec, multiprocessors, stream);
    case WriteOp::kErase:
      return launch_op<WriteOp::kErase>(t, a, vec, multiprocessors, stream);
  }
}

}  // namespace dynemb::table::cuda

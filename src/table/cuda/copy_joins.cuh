// Copies of a key that meet at its locked bucket (CopyJoins, docs/cuda_table.md "Copies of a key
// in one call"): a write's tile tries its bucket's lock once; only when the lock is taken does it
// look its key up in the launch's join entries, and either claims an entry (it then waits for the
// lock and, once done, publishes its outcome there) or waits for the claimer's outcome and takes
// its result without the lock.
#pragma once

#include <cstdint>

#include "cuda/device_layout.hpp"
#include "cuda/probe.cuh"

namespace dynemb::table::cuda {

// States of a join entry (a tag's bits 32-34); the outcomes come last, in this order.
inline constexpr uint32_t kJoinClaiming = 1;  // the claimer is writing the entry's key
inline constexpr uint32_t kJoinReady = 2;     // key written; the claimer waits for the lock
inline constexpr uint32_t kJoinStored = 3;    // the claimer's key is stored, its outputs written
inline constexpr uint32_t kJoinDeferred = 4;  // deferred to after a growth
inline constexpr uint32_t kJoinOther = 5;     // refused: every copy goes through the op itself

__device__ __forceinline__ unsigned long long join_tag(uint32_t epoch, uint32_t state,
                                                       uint32_t position) {
  return (static_cast<unsigned long long>(epoch) << 35) |
         (static_cast<unsigned long long>(state) << 32) | position;
}
__device__ __forceinline__ uint32_t join_epoch_of(unsigned long long tag) {
  return static_cast<uint32_t>(tag >> 35);
}
__device__ __forceinline__ uint32_t join_state_of(unsigned long long tag) {
  return static_cast<uint32_t>(tag >> 32) & 7u;
}

__device__ __forceinline__ unsigned long long load_acquire_u64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_u64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// The first of a key's two join entries (another mix of the hash than the bucket's).
__device__ __forceinline__ uint32_t first_join_entry(uint64_t hash, uint32_t entry_bits) {
  return static_cast<uint32_t>((hash * 0x9E3779B97F4A7C15ull) >> (64 - entry_bits)) & ~1u;
}

// One try at a bucket's lock (the leader's; acquire as lock_bucket's).
__device__ __forceinline__ bool try_lock_bucket(uint32_t* lock) {
  uint32_t old;
  asm volatile("atom.acquire.gpu.global.cas.b32 %0, [%1], 0, 1;"
               : "=r"(old)
               : "l"(lock)
               : "memory");
  return old == 0u;
}

// lock_bucket's wait, by the leader alone.
__device__ __forceinline__ void wait_lock_bucket(uint32_t* lock) {
  uint32_t pause = 32;
  while (!try_lock_bucket(lock)) {
    uint32_t old;
    do {
      __nanosleep(pause);
      pause = pause < 1024 ? pause * 2 : pause;
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(old) : "l"(lock) : "memory");
    } while (old != 0u);
  }
}

// What a copy's tile does after lock_or_join.
inline constexpr uint32_t kJoinHoldsLock = 0;  // the tile holds the lock (value: claimed entry + 1)
inline constexpr uint32_t kJoinTakesOwner = 1;  // take the result at batch position value
inline constexpr uint32_t kJoinDefers = 2;      // defer to after the growth, as the owner did
struct JoinOutcome {
  uint32_t kind;
  uint32_t value;
};

// The claimer's outcome, once it has one: take its result, defer, or (refused) take the lock
// and run the op.
__device__ __noinline__ JoinOutcome wait_for_claimer(const unsigned long long* tag,
                                                     uint32_t* lock) {
  uint32_t pause = 32;
  unsigned long long seen = load_acquire_u64(tag);
  while (join_state_of(seen) < kJoinStored) {
    __nanosleep(pause);
    pause = pause < 256 ? pause * 2 : pause;
    seen = load_acquire_u64(tag);
  }
  if (join_state_of(seen) == kJoinStored) return {kJoinTakesOwner, static_cast<uint32_t>(seen)};
  if (join_state_of(seen) == kJoinDeferred) return {kJoinDefers, 0};
  wait_lock_bucket(lock);
  return {kJoinHoldsLock, 0};
}

// Leader only, once its first try at the bucket's lock failed: finds the key's join entry of
// this launch and takes its claimer's outcome, or claims a free entry (then waits for the lock).
// Out of line: a call whose locks are free never comes here, and keeps its registers. When
// both entries hold other keys, or the look keeps meeting claims in progress, it waits for the
// lock as any key would. Every claimer is running when it is seen (it claims inside its own
// write), and a lock holder waits for nothing, so no wait here can be circular.
// (Arguments by value: a non-inlined callee given a kernel parameter by reference would have it
// copied to local memory.)
__device__ __noinline__ JoinOutcome lock_or_join(uint32_t* lock, CopyJoins j,
                                                 const CallState* state, uint64_t key,
                                                 uint64_t hash, uint32_t position) {
  const uint32_t epoch = __ldcg(&state->join_epoch);
  const uint32_t first = first_join_entry(hash, j.entry_bits);
  for (uint32_t attempt = 0; attempt < 64; ++attempt) {
    // Two scalars, not an array indexed at run time (which would live in local memory).
    const unsigned long long tag0 = load_acquire_u64(j.tags + first);
    const unsigned long long tag1 = load_acquire_u64(j.tags + first + 1);
    bool claiming = false;
    if (join_epoch_of(tag0) == epoch) {
      if (join_state_of(tag0) == kJoinClaiming) {
        claiming = true;
      } else if (__ldcg(j.keys + first) == key) {
        return wait_for_claimer(j.tags + first, lock);
      }
    }
    if (join_epoch_of(tag1) == epoch) {
      if (join_state_of(tag1) == kJoinClaiming) {
        claiming = true;
      } else if (__ldcg(j.keys + first + 1) == key) {
        return wait_for_claimer(j.tags + first + 1, lock);
      }
    }
    if (claiming) {  // a claimer is writing its key (a few hundred cycles): look again
      __nanosleep(64);
      continue;
    }
    const bool first_free = join_epoch_of(tag0) != epoch;
    if (!first_free && join_epoch_of(tag1) == epoch) break;  // both hold other keys
    const uint32_t entry = first_free ? first : first + 1;
    const unsigned long long seen = first_free ? tag0 : tag1;
    if (atomicCAS(j.tags + entry, seen, join_tag(epoch, kJoinClaiming, position)) == seen) {
      j.keys[entry] = key;
      store_release_u64(j.tags + entry, join_tag(epoch, kJoinReady, position));
      wait_lock_bucket(lock);
      return {kJoinHoldsLock, entry + 1};
    }
  }
  wait_lock_bucket(lock);
  return {kJoinHoldsLock, 0};
}

// The claimer, after its write: publishes `outcome` (its outputs, written by the whole tile,
// are fenced first).
template <uint32_t kT>
__device__ __forceinline__ void publish_join(const TileOf<kT>& tile, CopyJoins j,
                                             const CallState* state, uint32_t entry,
                                             uint32_t outcome, uint32_t position) {
  __threadfence();
  tile.sync();
  if (tile.thread_rank() == 0)
    store_release_u64(j.tags + entry, join_tag(__ldcg(&state->join_epoch), outcome, position));
}

}  // namespace dynemb::table::cuda

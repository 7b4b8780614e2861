// Per-slot ownership for the write kernels: a tile owns a slot while its key word holds
// kLockedKey. Claiming is a compare-and-swap from the key the tile expects (acquire), releasing
// a store of the slot's new key (release), so what the owner wrote to the row, score and digest
// is seen by the next owner. docs/cuda_table.md explains the protocol.
#pragma once

#include "table/cuda/probe.cuh"

namespace dynemb::cuda_table {

// Turns the slot's key word from `expected` into kLockedKey for the whole tile; false (for
// every thread) when the word held anything else.
__device__ __forceinline__ bool claim_slot(const Tile& tile, uint64_t* key_word,
                                           uint64_t expected) {
  unsigned long long old = 0;
  if (tile.thread_rank() == 0) {
    asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(old)
                 : "l"(key_word), "l"(expected), "l"(kLockedKey)
                 : "memory");
  }
  const bool claimed = tile.shfl(old, 0) == expected;
  if (claimed) tile.sync();
  return claimed;
}

// Marks an empty slot as owned; the caller holds the bucket lock (the only way empty slots are
// taken), so no other tile competes for it.
__device__ __forceinline__ void own_empty_slot(const Tile& tile, uint64_t* key_word) {
  if (tile.thread_rank() == 0) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(key_word), "l"(kLockedKey) : "memory");
  }
  tile.sync();
}

// Publishes the tile's writes to the slot and hands it on with `key` (the slot's key, or
// kEmptyKey after an erase) in its key word.
__device__ __forceinline__ void release_slot(const Tile& tile, uint64_t* key_word, uint64_t key) {
  tile.sync();
  if (tile.thread_rank() == 0) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(key_word), "l"(key) : "memory");
  }
}

// Where claiming a key's slot ended: the slot the tile now owns (-1: the key is not in the
// bucket) and, when asked for, an empty slot seen on the way.
struct Claim {
  int owned;
  int empty;
};

// Probes the bucket for `key_bits` and claims its slot, probing again whenever another tile
// took the slot first (it may have moved the key out: eviction, erase).
__device__ __forceinline__ Claim claim_key(const Tile& tile, const TableView& t, uint64_t bucket,
                                           uint64_t key_bits, uint8_t digest, bool want_empty) {
  uint64_t* keys = t.keys + bucket * t.bucket_capacity;
  for (;;) {
    const Probe probe = probe_bucket(tile, t, bucket, key_bits, digest, want_empty);
    if (probe.found < 0) return Claim{-1, probe.empty};
    if (claim_slot(tile, keys + probe.found, key_bits)) return Claim{probe.found, -1};
  }
}

}  // namespace dynemb::cuda_table

// Eviction victims of a full bucket: the lowest score, ties broken by the smallest key bit
// pattern. Either a scan of the bucket's scores, or (score_bounds kept) a search that reads the
// bucket's group bounds and only the groups that may hold the lowest score
// (docs/cuda_table.md, "Score bounds").
#pragma once

#include <cstdint>

#include "table/cuda/device_layout.hpp"
#include "table/cuda/probe.cuh"

namespace dynemb::cuda_table {

// A bucket's eviction victim.
struct Victim {
  int slot;
  uint64_t score;
  uint64_t key;
};

// The lowest of `value` over the tile (every thread gets it).
__device__ __forceinline__ uint64_t tile_min(const Tile& tile, uint64_t value) {
#pragma unroll
  for (uint32_t offset = kTileSize / 2; offset > 0; offset /= 2) {
    const uint64_t other = tile.shfl_xor(value, offset);
    value = other < value ? other : value;
  }
  return value;
}

// Among the slots whose score is `lowest`, the one with the smallest key (every thread gets it).
__device__ __forceinline__ Victim victim_among_ties(const Tile& tile, const TableView& t,
                                                    uint64_t bucket, uint64_t lowest) {
  const uint64_t base = bucket * t.bucket_capacity;
  uint64_t key = ~0ull;
  int slot = -1;
  for (uint32_t s = tile.thread_rank(); s < t.bucket_capacity; s += kTileSize) {
    if (__ldcg(t.scores + base + s) != lowest) continue;
    const uint64_t k = __ldcg(t.keys + base + s);
    if (slot < 0 || k < key) {
      key = k;
      slot = static_cast<int>(s);
    }
  }
#pragma unroll
  for (uint32_t offset = kTileSize / 2; offset > 0; offset /= 2) {
    const uint64_t other_key = tile.shfl_xor(key, offset);
    const int other_slot = tile.shfl_xor(slot, offset);
    if (other_slot >= 0 && (slot < 0 || other_key < key)) {
      key = other_key;
      slot = other_slot;
    }
  }
  return Victim{slot, lowest, key};
}

// Finds the victim of a full bucket by scanning its scores (every thread gets the same answer);
// keys are read only to break ties between equal lowest scores.
__device__ __forceinline__ Victim find_victim(const Tile& tile, const TableView& t,
                                              uint64_t bucket) {
  const uint64_t base = bucket * t.bucket_capacity;
  uint64_t low = ~0ull;
  int low_slot = -1;
  int ties = 0;
  for (uint32_t s = tile.thread_rank(); s < t.bucket_capacity; s += kTileSize) {
    const uint64_t sc = __ldcg(t.scores + base + s);
    if (low_slot < 0 || sc < low) {
      low = sc;
      low_slot = static_cast<int>(s);
      ties = 0;
    } else if (sc == low) {
      ++ties;
    }
  }
  const uint64_t best = tile_min(tile, low);
  const uint32_t holders = tile.ballot(low == best);
  const bool tied = __popc(holders) > 1 || tile.any(low == best && ties > 0);
  if (tied) return victim_among_ties(tile, t, bucket, best);
  const int slot = tile.shfl(low_slot, __ffs(holders) - 1);
  return Victim{slot, best, __ldcg(t.keys + base + slot)};
}

// Thread r of a tile keeps group r's bound during a search and reads slots 2r, 2r + 1 of a group.
static_assert(kScoreGroups == kTileSize && kScoreGroupSlots == 2 * kTileSize);

// What a bounded victim search leaves for store_score_bounds: the victim (its slot's group is
// the victim's group) and this thread's group bound (exact where the search read the group).
struct BoundedVictim {
  Victim victim;
  uint64_t bound;
  bool refreshed;
};

// The lowest score of one group (thread r holds slots 2r and 2r + 1 of it as `pair`), a slot that
// holds it, and whether another slot of the group holds it too.
struct GroupLow {
  uint64_t low;
  int slot;
  bool tied;
};

__device__ __forceinline__ GroupLow group_low(const Tile& tile, uint4 pair, int first_slot) {
  const uint64_t a = uint64_t{pair.y} << 32 | pair.x;
  const uint64_t b = uint64_t{pair.w} << 32 | pair.z;
  const uint64_t low = tile_min(tile, a < b ? a : b);
  const uint32_t at_a = tile.ballot(a == low);
  const uint32_t at_b = tile.ballot(b == low);
  const int holder = __ffs(at_a != 0 ? at_a : at_b) - 1;
  const int slot =
      first_slot - 2 * static_cast<int>(tile.thread_rank()) + 2 * holder + (at_a != 0 ? 0 : 1);
  return GroupLow{low, slot, __popc(at_a) + __popc(at_b) > 1};
}

// Finds the victim of a full bucket of kBoundedBucketSlots slots through its group bounds
// (t.score_bounds, each at most its group's lowest score): reads the groups in order of their
// bounds while a bound is at most the lowest score found, so a group that cannot hold the
// lowest score (or a tie with it) is never read. Every thread gets the same victim.
__device__ __forceinline__ BoundedVictim find_victim_bounded(const Tile& tile, const TableView& t,
                                                             uint64_t bucket) {
  const uint64_t base = bucket * t.bucket_capacity;
  const uint32_t rank = tile.thread_rank();
  const auto* lines = reinterpret_cast<const uint4*>(t.scores + base);
  uint64_t bound = __ldcg(t.score_bounds + bucket * kScoreGroups + rank);
  bool refreshed = false;
  bool tied = false;
  GroupLow best{0, -1, false};
  for (;;) {
    const bool candidate = !refreshed && (best.slot < 0 || bound <= best.low);
    if (tile.ballot(candidate) == 0) break;
    const uint64_t lowest_bound = tile_min(tile, candidate ? bound : ~0ull);
    const int group = __ffs(tile.ballot(candidate && bound == lowest_bound)) - 1;
    const GroupLow g = group_low(tile, __ldcg(lines + group * kTileSize + rank),
                                 group * kScoreGroupSlots + 2 * rank);
    if (static_cast<int>(rank) == group) {
      bound = g.low;
      refreshed = true;
    }
    if (best.slot < 0 || g.low < best.low) {
      best = g;
      tied = g.tied;
    } else if (g.low == best.low) {
      tied = true;
    }
  }
  BoundedVictim v;
  v.bound = bound;
  v.refreshed = refreshed;
  v.victim = tied ? victim_among_ties(tile, t, bucket, best.low)
                  : Victim{best.slot, best.low, __ldcg(t.keys + base + best.slot)};
  return v;
}

// Writes back the bounds a bounded search refreshed (each the exact lowest score of its group).
// An eviction needs no change of its group's bound: the victim's group was read, so its bound is
// the victim's score, which is at most the new score (may_evict), and stays a valid lower bound.
__device__ __forceinline__ void store_score_bounds(const Tile& tile, const TableView& t,
                                                   uint64_t bucket, const BoundedVictim& v) {
  if (v.refreshed) t.score_bounds[bucket * kScoreGroups + tile.thread_rank()] = v.bound;
}

}  // namespace dynemb::cuda_table

// Eviction victims of a full bucket: the lowest score, ties broken by the smallest key bit
// pattern. Either a scan of the bucket's scores, or (score_bounds kept) a search that reads the
// bucket's group bounds and only the groups that may hold the lowest score
// (docs/cuda_table.md, "Score bounds").
#pragma once

#include <cstdint>

#include "cuda/device_layout.hpp"
#include "cuda/probe.cuh"

namespace dynemb::table::cuda {

// A bucket's eviction victim.
struct Victim {
  int slot;
  uint64_t score;
  uint64_t key;
};

// The lowest of `value` over the tile (every thread gets it).
template <uint32_t kT>
__device__ __forceinline__ uint64_t tile_min(const TileOf<kT>& tile, uint64_t value) {
#pragma unroll
  for (uint32_t offset = kT / 2; offset > 0; offset /= 2) {
    const uint64_t other = tile.shfl_xor(value, offset);
    value = other < value ? other : value;
  }
  return value;
}

// Among the slots whose score is `lowest`, the one with the smallest key (every thread gets it).
template <uint32_t kT>
__device__ __forceinline__ Victim victim_among_ties(const TileOf<kT>& tile, const TableView& t,
                                                    uint64_t bucket, uint64_t lowest) {
  const uint64_t base = bucket * t.bucket_capacity;
  uint64_t key = ~0ull;
  int slot = -1;
  for (uint32_t s = tile.thread_rank(); s < t.bucket_capacity; s += kT) {
    if (__ldcg(t.scores + base + s) != lowest) continue;
    const uint64_t k = __ldcg(t.keys + base + s);
    if (slot < 0 || k < key) {
      key = k;
      slot = static_cast<int>(s);
    }
  }
#pragma unroll
  for (uint32_t offset = kT / 2; offset > 0; offset /= 2) {
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
template <uint32_t kT>
__device__ __forceinline__ Victim find_victim(const TileOf<kT>& tile, const TableView& t,
                                              uint64_t bucket) {
  const uint64_t base = bucket * t.bucket_capacity;
  uint64_t low = ~0ull;
  int low_slot = -1;
  int ties = 0;
  for (uint32_t s = tile.thread_rank(); s < t.bucket_capacity; s += kT) {
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

// During a search, thread r of a kT-thread tile keeps the bounds of kGroupsPerThread groups from
// group r * kGroupsPerThread on, and reads kGroupSlotsPerThread consecutive slots of a group.
template <uint32_t kT>
inline constexpr uint32_t kGroupsPerThread = kScoreGroups / kT;
template <uint32_t kT>
inline constexpr uint32_t kGroupSlotsPerThread = kScoreGroupSlots / kT;

// What a bounded victim search leaves for store_score_bounds: the victim (its slot's group is
// the victim's group) and this thread's group bounds (exact where the search read the group:
// bit g of `refreshed`).
template <uint32_t kT>
struct BoundedVictim {
  Victim victim;
  uint64_t bound[kGroupsPerThread<kT>];
  uint32_t refreshed;
};

// The lowest score of one group, a slot that holds it, and whether another slot holds it too.
struct GroupLow {
  uint64_t low;
  int slot;
  bool tied;
};

// group_low of the group whose slots [first_slot, first_slot + kGroupSlotsPerThread) this
// thread holds as `scores`.
template <uint32_t kT>
__device__ __forceinline__ GroupLow group_low(const TileOf<kT>& tile,
                                              const uint64_t (&scores)[kGroupSlotsPerThread<kT>],
                                              int first_slot) {
  constexpr uint32_t kSlots = kGroupSlotsPerThread<kT>;
  uint64_t mine = scores[0];
#pragma unroll
  for (uint32_t j = 1; j < kSlots; ++j) mine = scores[j] < mine ? scores[j] : mine;
  const uint64_t low = tile_min(tile, mine);
  if constexpr (kSlots == 2) {
    const uint32_t at_a = tile.ballot(scores[0] == low);
    const uint32_t at_b = tile.ballot(scores[1] == low);
    const int holder = __ffs(at_a != 0 ? at_a : at_b) - 1;
    const int slot =
        first_slot - 2 * static_cast<int>(tile.thread_rank()) + 2 * holder + (at_a != 0 ? 0 : 1);
    return GroupLow{low, slot, __popc(at_a) + __popc(at_b) > 1};
  } else {
    int at = -1;
    uint32_t count = 0;
#pragma unroll
    for (uint32_t j = 0; j < kSlots; ++j) {
      if (scores[j] == low) {
        if (at < 0) at = static_cast<int>(j);
        ++count;
      }
    }
    const uint32_t holders = tile.ballot(count != 0);
    const int slot = tile.shfl(first_slot + at, __ffs(holders) - 1);
    return GroupLow{low, slot, __popc(holders) > 1 || tile.any(count > 1)};
  }
}

// Finds the victim of a full bucket of kBoundedBucketSlots slots through its group bounds
// (t.score_bounds, each at most its group's lowest score): reads the groups in order of their
// bounds while a bound is at most the lowest score found, so a group that cannot hold the
// lowest score (or a tie with it) is never read. Every thread gets the same victim.
template <uint32_t kT>
__device__ __forceinline__ BoundedVictim<kT> find_victim_bounded(const TileOf<kT>& tile,
                                                                 const TableView& t,
                                                                 uint64_t bucket) {
  constexpr uint32_t kGroups = kGroupsPerThread<kT>;
  constexpr uint32_t kSlots = kGroupSlotsPerThread<kT>;
  static_assert(kScoreGroups % kT == 0 && kSlots % 2 == 0);
  const uint64_t base = bucket * t.bucket_capacity;
  const uint32_t rank = tile.thread_rank();
  const auto* lines = reinterpret_cast<const uint4*>(t.scores + base);
  BoundedVictim<kT> v;
  v.refreshed = 0;
#pragma unroll
  for (uint32_t g = 0; g < kGroups; ++g)
    v.bound[g] = __ldcg(t.score_bounds + bucket * kScoreGroups + rank * kGroups + g);
  bool tied = false;
  GroupLow best{0, -1, false};
  for (;;) {
    // This thread's candidate group with the lowest bound (the first of equal bounds).
    uint64_t lowest_mine = ~0ull;
    int pick = -1;
#pragma unroll
    for (uint32_t g = 0; g < kGroups; ++g) {
      const bool candidate = !(v.refreshed >> g & 1u) && (best.slot < 0 || v.bound[g] <= best.low);
      if (candidate && (pick < 0 || v.bound[g] < lowest_mine)) {
        lowest_mine = v.bound[g];
        pick = static_cast<int>(g);
      }
    }
    if (tile.ballot(pick >= 0) == 0) break;
    const uint64_t lowest_bound = tile_min(tile, lowest_mine);
    const int holder = __ffs(tile.ballot(pick >= 0 && lowest_mine == lowest_bound)) - 1;
    const uint32_t group = tile.shfl(rank * kGroups + pick, holder);
    const uint32_t first = group * kScoreGroupSlots + rank * kSlots;
    uint64_t scores[kSlots];
#pragma unroll
    for (uint32_t q = 0; q < kSlots / 2; ++q) {
      const uint4 pair = __ldcg(lines + first / 2 + q);
      scores[2 * q] = uint64_t{pair.y} << 32 | pair.x;
      scores[2 * q + 1] = uint64_t{pair.w} << 32 | pair.z;
    }
    const GroupLow g = group_low(tile, scores, static_cast<int>(first));
#pragma unroll
    for (uint32_t k = 0; k < kGroups; ++k) {
      if (group == rank * kGroups + k) {
        v.bound[k] = g.low;
        v.refreshed |= 1u << k;
      }
    }
    if (best.slot < 0 || g.low < best.low) {
      best = g;
      tied = g.tied;
    } else if (g.low == best.low) {
      tied = true;
    }
  }
  v.victim = tied ? victim_among_ties(tile, t, bucket, best.low)
                  : Victim{best.slot, best.low, __ldcg(t.keys + base + best.slot)};
  return v;
}

// Writes back the bounds a bounded search refreshed (each the exact lowest score of its group).
// An eviction needs no change of its group's bound: the victim's group was read, so its bound is
// the victim's score, which is at most the new score (may_evict), and stays a valid lower bound.
template <uint32_t kT>
__device__ __forceinline__ void store_score_bounds(const TileOf<kT>& tile, const TableView& t,
                                                   uint64_t bucket, const BoundedVictim<kT>& v) {
#pragma unroll
  for (uint32_t g = 0; g < kGroupsPerThread<kT>; ++g) {
    if (v.refreshed >> g & 1u)
      t.score_bounds[bucket * kScoreGroups + tile.thread_rank() * kGroupsPerThread<kT> + g] =
          v.bound[g];
  }
}

}  // namespace dynemb::table::cuda

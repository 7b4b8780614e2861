// The query kernels (one warp per key, no lock: a per-set version check around each read) and the
// compaction of their misses into batch order: fused into the query for batches up to
// kFusedMaxKeys (one launch), a separate compaction for larger ones.
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_select.cuh>

#include "cuda/device_view.cuh"
#include "cuda/driver_launch.hpp"
#include "cuda/kernels.hpp"
#include "cuda/query_graphs.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"

namespace dynemb::cache::detail {
namespace {

constexpr int kBlockThreads = 256;
constexpr int kWarpsPerBlock = kBlockThreads / kWarp;
// The fused query's block scans kFusedItems miss flags per thread (kMaxFusedTile keys a tile).
constexpr uint32_t kFusedItems = kMaxFusedTile / kBlockThreads;
static_assert(kFusedItems * kBlockThreads == kMaxFusedTile);

// Reads key's row from `set` into out when the set holds it, and stamps the slot; false when the
// set does not hold the key. Lock-free: the row is read between two reads of the set's version
// and kept only if the version did not change (a writer in between makes the warp read again).
// C > 0: the row is staged in C registers per lane (float4 ones when V4) and written to out only
// after the check, so out is untouched on a miss. C == 0 (rows over 1024 floats): the row is
// copied straight to out and copied again on a retry.
template <class K, int R, int C, bool V4>
__device__ bool read_from_set(const CacheView<K>& c, uint64_t set, K key, int lane, float* out,
                              unsigned long long stamp) {
  uint32_t* version = c.versions + set;
  const K* set_keys = c.keys + set * c.ways;
  for (;;) {
    uint32_t before = 0;
    if (lane == 0) before = version_ref(version).load(::cuda::memory_order_acquire);
    __syncwarp();
    before = __shfl_sync(kFullMask, before, 0);
    if ((before & 1u) != 0) {
      __nanosleep(64);
      continue;
    }
    const int way = find_in_set<R>(set_keys, key, lane);
    if (way < 0) return false;
    const uint64_t slot = set * c.ways + static_cast<uint64_t>(way);
    const float* row = c.values + slot * c.dim;
    [[maybe_unused]] float4 staged4[C > 0 ? C : 1];
    [[maybe_unused]] float staged[C > 0 ? C : 1];
    if constexpr (C > 0 && V4) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim / 4) staged4[k] = __ldcg(reinterpret_cast<const float4*>(row) + e);
      }
    } else if constexpr (C > 0) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim) staged[k] = __ldcg(row + e);
      }
    } else {
      for (uint32_t e = lane; e < c.dim; e += kWarp) out[e] = __ldcg(row + e);
    }
    // The row's loads complete before the version is read again.
    acquire_fence();
    __syncwarp();
    uint32_t after = 0;
    if (lane == 0) after = version_ref(version).load(::cuda::memory_order_relaxed);
    after = __shfl_sync(kFullMask, after, 0);
    if (after != before) continue;
    if constexpr (C > 0 && V4) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim / 4) reinterpret_cast<float4*>(out)[e] = staged4[k];
      }
    } else if constexpr (C > 0) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim) out[e] = staged[k];
      }
    }
    if (lane == 0) touch_stamp(c.stamps + slot, stamp);
    return true;
  }
}

// Keys a warp of the fused kernel reads at once: 2 while the staged rows take at most 8 floats a
// lane and a set at most 2 keys a lane (more keys in flight cost more registers than they win in
// occupancy); 1 for rows copied unstaged (C == 0). The fused query's launcher takes 1 for tiles
// of one key a warp, where a warp has no second key to pair.
template <int R, int C, bool V4>
constexpr int group_keys() {
  constexpr int floats = C * (V4 ? 4 : 1);
  return (C == 0 || floats > 8 || R > 2) ? 1 : 2;
}

// The value of v[i] for i = `index`, without indexing a register array by a runtime value.
template <int N, class T>
__device__ __forceinline__ T pick(const T (&v)[N], int index) {
  T out = v[0];
#pragma unroll
  for (int i = 1; i < N; ++i) {
    if (index == i) out = v[i];
  }
  return out;
}

// Copies a row this warp just wrote to `from` (each lane its own elements, as read_from_set
// writes them) to the positions in `copies` (window_out + p * stride for bit p).
template <bool V4>
__device__ void copy_to_copies(uint32_t dim, const float* from, unsigned copies, float* window_out,
                               size_t stride, int lane) {
  for (; copies != 0; copies &= copies - 1) {
    float* to = window_out + static_cast<size_t>(__ffs(copies) - 1) * stride;
    if constexpr (V4) {
      for (uint32_t e = lane; e < dim / 4; e += kWarp) {
        reinterpret_cast<float4*>(to)[e] = reinterpret_cast<const float4*>(from)[e];
      }
    } else {
      for (uint32_t e = lane; e < dim; e += kWarp) to[e] = from[e];
    }
  }
}

// Reads the rows of G keys at once (key[g] for g < live; the same in every lane) into out[g] in
// three round trips to memory, each with every key's loads in flight together:
// 1. the keys of all 2G candidate sets and, issued after them, the sets' versions (acquire);
// 2. for a key found in a set whose version was even: its row, its slot's key again and stamp;
// 3. that set's version again. The row is good when the version did not change and the slot
//    still held the key: both were read between the two version reads, which no writer crossed.
// The keys of step 1 are read before the version, so they only say where to look: a key found
// there is checked in step 2, and a key not found was absent at that moment (writers never remove
// a stored key for a while; they only erase or evict it). hit[g] says whether key g was found.
// A key met while a writer held one of its sets (an odd version, or one that changed while its
// row was read) is read again alone with read_from_set, which waits for the writer.
template <class K, int R, int C, bool V4, int G>
__device__ void read_group(const CacheView<K>& c, const K (&key)[G], int live,
                           float* const (&out)[G], const unsigned (&also)[G], float* window_out,
                           size_t stride, bool (&hit)[G], int lane, unsigned long long stamp) {
  uint64_t set[2 * G];
  bool looked[2 * G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const bool on = g < live && key[g] != c.empty_key;
    const CandidateSets cs =
        on ? candidate_sets(cache_key_bits(key[g]), c.num_sets) : CandidateSets{0, 0};
    set[2 * g] = cs.first;
    set[2 * g + 1] = cs.second;
    looked[2 * g] = looked[2 * g + 1] = on;
    hit[g] = false;
  }
  // 1. The keys of every set, then the versions (lane i reads set i's). The version loads come
  // after the key loads in program order, so the key loads are not held back by their acquire.
  K slot_key[2 * G][R];
#pragma unroll
  for (int i = 0; i < 2 * G; ++i) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      slot_key[i][r] =
          looked[i] ? load_cg(c.keys + set[i] * c.ways + r * kWarp + lane) : c.empty_key;
    }
  }
  uint32_t mine = 0;
  if (lane < 2 * G && pick(looked, lane)) {
    mine = version_ref(c.versions + pick(set, lane)).load(::cuda::memory_order_acquire);
  }
  __syncwarp();
  uint32_t before[2 * G];
#pragma unroll
  for (int i = 0; i < 2 * G; ++i) before[i] = __shfl_sync(kFullMask, mine, i);
  int way[2 * G];
#pragma unroll
  for (int i = 0; i < 2 * G; ++i) {
    way[i] = -1;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const unsigned match = __ballot_sync(kFullMask, looked[i] && slot_key[i][r] == key[i / 2]);
      if (way[i] < 0 && match != 0) way[i] = r * kWarp + __ffs(match) - 1;
    }
  }
  // 2. The rows of the keys found, staged in registers; lane g reads key g's slot key and stamp.
  bool again[G];
  int chosen[G];
  uint64_t chosen_slot[G];
  uint32_t chosen_before[G];
  K slot_key_again = c.empty_key;
  unsigned long long slot_stamp = 0;
  [[maybe_unused]] float4 staged4[G][C > 0 ? C : 1];
  [[maybe_unused]] float staged[G][C > 0 ? C : 1];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int found = way[2 * g] >= 0 ? 2 * g : (way[2 * g + 1] >= 0 ? 2 * g + 1 : -1);
    // A key found needs its own set free; a key found in neither needs both (it may be on its
    // way into the locked one).
    const uint32_t versions =
        found >= 0 ? pick(before, found) : (before[2 * g] | before[2 * g + 1]);
    again[g] = looked[2 * g] && (versions & 1u) != 0;
    chosen[g] = again[g] ? -1 : found;
    chosen_slot[g] = 0;
    chosen_before[g] = 0;
    if (chosen[g] < 0) continue;
    chosen_slot[g] = pick(set, chosen[g]) * c.ways + static_cast<uint64_t>(pick(way, chosen[g]));
    chosen_before[g] = pick(before, chosen[g]);
    if (lane == g) {
      slot_key_again = load_cg(c.keys + chosen_slot[g]);
      slot_stamp = stamp_ref(c.stamps + chosen_slot[g]).load(::cuda::memory_order_relaxed);
    }
    const float* row = c.values + chosen_slot[g] * c.dim;
    if constexpr (V4) {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim / 4) staged4[g][k] = __ldcg(reinterpret_cast<const float4*>(row) + e);
      }
    } else {
#pragma unroll
      for (int k = 0; k < C; ++k) {
        const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
        if (e < c.dim) staged[g][k] = __ldcg(row + e);
      }
    }
  }
  // 3. The versions again (lane g reads key g's set): unchanged, with the key still in its slot,
  // makes the row good.
  acquire_fence();
  __syncwarp();
  bool mine_good = false;
  if (lane < G && pick(chosen, lane) >= 0) {
    const uint64_t set_of_row = pick(chosen_slot, lane) / c.ways;
    const uint32_t after = version_ref(c.versions + set_of_row).load(::cuda::memory_order_relaxed);
    mine_good = after == pick(chosen_before, lane) && slot_key_again == pick(key, lane);
  }
  const unsigned good = __ballot_sync(kFullMask, mine_good);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (chosen[g] < 0) continue;
    if (((good >> g) & 1u) == 0) {
      again[g] = true;
      continue;
    }
    // The key's own position, then the positions of its copies in the window.
    float* to = out[g];
    for (unsigned rest = also[g];; rest &= rest - 1) {
      if constexpr (V4) {
#pragma unroll
        for (int k = 0; k < C; ++k) {
          const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
          if (e < c.dim / 4) reinterpret_cast<float4*>(to)[e] = staged4[g][k];
        }
      } else {
#pragma unroll
        for (int k = 0; k < C; ++k) {
          const uint32_t e = static_cast<uint32_t>(lane + k * kWarp);
          if (e < c.dim) to[e] = staged[g][k];
        }
      }
      if (rest == 0) break;
      to = window_out + static_cast<size_t>(__ffs(rest) - 1) * stride;
    }
    hit[g] = true;
  }
  // The stamp read in step 2 says whether the slot needs the query's (newer) stamp.
  if (mine_good && slot_stamp < stamp) {
    stamp_ref(c.stamps + pick(chosen_slot, lane)).store(stamp, ::cuda::memory_order_relaxed);
  }
  // 4. Keys met during a write, one by one.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (!again[g]) continue;
    hit[g] = read_from_set<K, R, C, V4>(c, set[2 * g], key[g], lane, out[g], stamp) ||
             read_from_set<K, R, C, V4>(c, set[2 * g + 1], key[g], lane, out[g], stamp);
    if (hit[g]) copy_to_copies<V4>(c.dim, out[g], also[g], window_out, stride, lane);
  }
}

// Reads the keys of a window of up to 32 positions (lane p < window holds the p-th in `mine`;
// position p's row goes to window_out + p * stride). Copies of a key are read once, by the
// lowest lane holding it, G keys at once, and its row is written to every copy's position; the
// key's stamp is refreshed once. Returns the window's hits, a bit per position.
template <class K, int R, int C, bool V4, int G = group_keys<R, C, V4>()>
__device__ unsigned read_window(const CacheView<K>& c, K mine, uint32_t window, float* window_out,
                                size_t stride, int lane, unsigned long long stamp) {
  const unsigned valid = window >= static_cast<uint32_t>(kWarp) ? kFullMask : (1u << window) - 1u;
  const unsigned same = __match_any_sync(kFullMask, mine) & valid;
  const bool leads = static_cast<uint32_t>(lane) < window && __ffs(same) - 1 == lane;
  unsigned leaders = __ballot_sync(kFullMask, leads);  // the lanes still to read
  unsigned hits = 0;
  while (leaders != 0) {
    // The next G lanes to read (live of them; the rest repeat the first, unread).
    int pos[G];
    pos[0] = __ffs(leaders) - 1;
    leaders &= leaders - 1;
    int live = 1;
#pragma unroll
    for (int g = 1; g < G; ++g) {
      pos[g] = leaders != 0 ? __ffs(leaders) - 1 : pos[0];
      if (leaders != 0) ++live;
      leaders &= leaders - 1;
    }
    K key[G];
    float* out[G];
    unsigned copies[G];
    unsigned also[G];
    bool hit[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const K k = __shfl_sync(kFullMask, mine, pos[g]);
      copies[g] = __shfl_sync(kFullMask, same, pos[g]);
      key[g] = g < live ? k : c.empty_key;
      out[g] = window_out + static_cast<size_t>(pos[g]) * stride;
      also[g] = g < live ? copies[g] & ~(1u << pos[g]) : 0u;
    }
    if constexpr (C == 0) {
      const CandidateSets sets = key[0] == c.empty_key
                                     ? CandidateSets{0, 0}
                                     : candidate_sets(cache_key_bits(key[0]), c.num_sets);
      hit[0] = key[0] != c.empty_key &&
               (read_from_set<K, R, C, V4>(c, sets.first, key[0], lane, out[0], stamp) ||
                read_from_set<K, R, C, V4>(c, sets.second, key[0], lane, out[0], stamp));
      if (hit[0]) copy_to_copies<V4>(c.dim, out[0], also[0], window_out, stride, lane);
    } else {
      read_group<K, R, C, V4, G>(c, key, live, out, also, window_out, stride, hit, lane, stamp);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g < live && hit[g]) hits |= copies[g];
    }
  }
  return hits;
}

// Queries any number of keys, flagging misses in `missed`: each warp takes windows of 32
// consecutive keys (lane l loads the l-th), reads them G at once, and writes the window's flags
// together.
template <class K, int R, int C, bool V4>
__global__ void __launch_bounds__(kBlockThreads)
    query_kernel(CacheView<K> c, size_t n, const K* __restrict__ keys, float* values,
                 uint8_t* __restrict__ missed, unsigned long long stamp) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const size_t warps = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  unsigned long long sentinels = 0;
  for (size_t start =
           (static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp) * kWarp;
       start < n; start += warps * kWarp) {
    const uint32_t window = static_cast<uint32_t>(n - start < kWarp ? n - start : kWarp);
    K mine = c.empty_key;
    if (static_cast<uint32_t>(lane) < window) {
      mine = keys[start + lane];
      if (mine == c.empty_key) ++sentinels;
    }
    const unsigned hits =
        read_window<K, R, C, V4>(c, mine, window, values + start * c.dim, c.dim, lane, stamp);
    if (static_cast<uint32_t>(lane) < window) missed[start + lane] = ((hits >> lane) & 1u) ? 0 : 1;
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    sentinels += __shfl_xor_sync(kFullMask, sentinels, offset);
  }
  if (lane == 0) add_count(&c.counters->sentinel_keys, sentinels);
}

// The end of a fused query's block whose tile holds at most 32 keys, run by one warp (lane l
// holds the tile's key l): the misses' count is one ballot, and the block's place in the list is
// taken as the block-wide path takes it (one atomic add on `arrivals`, or the tagged counts of the
// blocks before it in `status`). The last block writes *miss_count and the counters.
template <class K>
__device__ void list_small_tile_misses(const CacheView<K>& c, size_t n, size_t first,
                                       uint32_t count, const uint8_t* missed, const K* tile_keys,
                                       K* missing_keys, uint64_t* missing_positions,
                                       uint64_t* miss_count, TileStatus* status,
                                       unsigned long long tag, unsigned long long* arrivals,
                                       int lane) {
  const bool miss = static_cast<uint32_t>(lane) < count && missed[lane] != 0;
  const unsigned flags = __ballot_sync(kFullMask, miss);
  const unsigned long long block_misses = static_cast<unsigned>(__popc(flags));
  unsigned long long before = 0;
  bool last = false;
  if (arrivals != nullptr) {
    unsigned long long arrived = 0;
    if (lane == 0) arrived = atomicAdd(arrivals, (1ull << kArrivalShift) | block_misses);
    arrived = __shfl_sync(kFullMask, arrived, 0);
    before = arrived & kArrivalMissMask;
    last = (arrived >> kArrivalShift) == gridDim.x - 1;
    if (last && lane == 0) {
      // Every block has arrived: the word is left zero for the stream's next call.
      ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(*arrivals).store(
          0, ::cuda::memory_order_relaxed);
    }
  } else {
    if (lane == 0) {
      ::cuda::atomic_ref<TileStatus, ::cuda::thread_scope_device>(status[blockIdx.x])
          .store((tag << kTileCountBits) | block_misses, ::cuda::memory_order_relaxed);
    }
    // The counts of the blocks before, kLoads a lane in flight at once (one round trip for up
    // to 256 blocks before this one).
    constexpr uint32_t kLoads = 8;
    for (uint32_t base = 0; base < blockIdx.x; base += kLoads * kWarp) {
      TileStatus word[kLoads];
#pragma unroll
      for (uint32_t i = 0; i < kLoads; ++i) {
        const uint32_t t = base + i * kWarp + static_cast<uint32_t>(lane);
        word[i] = t < blockIdx.x
                      ? ::cuda::atomic_ref<TileStatus, ::cuda::thread_scope_device>(status[t]).load(
                            ::cuda::memory_order_relaxed)
                      : tag << kTileCountBits;
      }
#pragma unroll
      for (uint32_t i = 0; i < kLoads; ++i) {
        const uint32_t t = base + i * kWarp + static_cast<uint32_t>(lane);
        while ((word[i] >> kTileCountBits) != tag) {
          __nanosleep(32);
          word[i] = ::cuda::atomic_ref<TileStatus, ::cuda::thread_scope_device>(status[t]).load(
              ::cuda::memory_order_relaxed);
        }
        before += word[i] & ((1ull << kTileCountBits) - 1);
      }
    }
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      before += __shfl_xor_sync(kFullMask, before, offset);
    }
    last = blockIdx.x == gridDim.x - 1;
  }
  if (miss) {
    const uint64_t at = before + static_cast<unsigned>(__popc(flags & ((1u << lane) - 1u)));
    missing_keys[at] = tile_keys[lane];
    missing_positions[at] = first + static_cast<uint32_t>(lane);
  }
  if (last && lane == 0) {
    const unsigned long long total = before + block_misses;
    *miss_count = total;
    add_count(&c.counters->misses, total);
    add_count(&c.counters->hits, n - total);
  }
}

// Queries the keys of one tile per block (tiles of `tile` consecutive keys, one warp per key),
// then writes the tile's misses in batch order: the block counts its misses, publishes the count
// in status[block] (one word: the call's tag above the count), adds up the counts the blocks
// before it published (waiting for each one's tag) and writes its misses after theirs. The last
// block writes *miss_count and the counters. status needs no initialization: a slot counts only
// once it holds this call's tag (unique among the calls sharing status). Blocks wait only on blocks
// of lower index, which are dispatched first, so the wait ends even when not all blocks fit at
// once.
// With `arrivals` (misses in any order) a block instead takes its place in the list with one atomic
// add on that word, so no block waits for another.
template <class K, int R, int C, bool V4, int G>
__global__ void __launch_bounds__(kBlockThreads)
    query_fused_kernel(CacheView<K> c, size_t n, uint32_t tile, const K* __restrict__ keys,
                       float* values, K* __restrict__ missing_keys,
                       uint64_t* __restrict__ missing_positions, uint64_t* miss_count,
                       TileStatus* status, unsigned long long tag, unsigned long long stamp,
                       unsigned long long* arrivals) {
  using Scan = cub::BlockScan<uint32_t, kBlockThreads>;
  using Reduce = cub::BlockReduce<unsigned long long, kBlockThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } scratch;
  __shared__ uint8_t missed[kMaxFusedTile];
  __shared__ K tile_keys[kMaxFusedTile];  // the tile's keys, for the list of misses
  __shared__ unsigned long long misses_before;
  const size_t first = static_cast<size_t>(blockIdx.x) * tile;
  const uint32_t count = static_cast<uint32_t>(n - first < tile ? n - first : tile);
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const uint32_t warp = threadIdx.x / kWarp;
  unsigned long long sentinels = 0;
  // Warp w reads keys w, w + 8, w + 16, ... of the tile: its m-th key is at w + 8 m. The warp
  // loads them 32 at a time (lane l the (b + l)-th, for a window starting at b) and reads the
  // window with read_window.
  const uint32_t warp_keys =
      warp < count ? (count - warp + kWarpsPerBlock - 1) / kWarpsPerBlock : 0;
  for (uint32_t b = 0; b < warp_keys; b += kWarp) {
    const uint32_t window = min(static_cast<uint32_t>(kWarp), warp_keys - b);
    const uint32_t mine_at = warp + (b + static_cast<uint32_t>(lane)) * kWarpsPerBlock;
    K mine = c.empty_key;
    if (static_cast<uint32_t>(lane) < window) {
      mine = keys[first + mine_at];
      tile_keys[mine_at] = mine;
      if (mine == c.empty_key) ++sentinels;
    }
    // Position p of the window is the tile's key warp + 8 (b + p).
    const unsigned hits = read_window<K, R, C, V4, G>(
        c, mine, window, values + (first + warp + b * kWarpsPerBlock) * c.dim,
        static_cast<size_t>(kWarpsPerBlock) * c.dim, lane, stamp);
    if (static_cast<uint32_t>(lane) < window) missed[mine_at] = ((hits >> lane) & 1u) ? 0 : 1;
  }
  // Lanes counted sentinels; one add per warp.
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    sentinels += __shfl_xor_sync(kFullMask, sentinels, offset);
  }
  if (lane == 0) add_count(&c.counters->sentinel_keys, sentinels);
  __syncthreads();
  if (tile <= static_cast<uint32_t>(kWarp)) {
    // A tile of at most 32 keys: one warp lists its misses (one ballot, no block-wide scan).
    if (warp == 0) {
      list_small_tile_misses(c, n, first, count, missed, tile_keys, missing_keys, missing_positions,
                             miss_count, status, tag, arrivals, lane);
    }
    return;
  }

  uint32_t flags[kFusedItems];
  uint32_t mine = 0;
#pragma unroll
  for (uint32_t k = 0; k < kFusedItems; ++k) {
    const uint32_t j = threadIdx.x * kFusedItems + k;
    flags[k] = j < count ? missed[j] : 0u;
    mine += flags[k];
  }
  uint32_t offset = 0;
  uint32_t block_misses = 0;
  Scan(scratch.scan).ExclusiveSum(mine, offset, block_misses);
  if (arrivals != nullptr) {
    // Misses in any order: one atomic add reserves the block's place in the list and counts its
    // arrival; the block that arrives last writes the totals and leaves the word zero for the
    // stream's next call (calls on a stream run one after another).
    if (threadIdx.x == 0) {
      const unsigned long long arrived =
          atomicAdd(arrivals, (1ull << kArrivalShift) | block_misses);
      misses_before = arrived & kArrivalMissMask;
      if ((arrived >> kArrivalShift) == gridDim.x - 1) {
        const unsigned long long total = misses_before + block_misses;
        *miss_count = total;
        add_count(&c.counters->misses, total);
        add_count(&c.counters->hits, n - total);
        ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(*arrivals).store(
            0, ::cuda::memory_order_relaxed);
      }
    }
    __syncthreads();
    uint64_t at = misses_before + offset;
#pragma unroll
    for (uint32_t k = 0; k < kFusedItems; ++k) {
      if (flags[k] == 0) continue;
      const uint32_t j = threadIdx.x * kFusedItems + k;
      missing_keys[at] = tile_keys[j];
      missing_positions[at] = first + j;
      ++at;
    }
    return;
  }
  if (threadIdx.x == 0) {
    // One word, so no fence: nothing else the readers use is published with it.
    ::cuda::atomic_ref<TileStatus, ::cuda::thread_scope_device>(status[blockIdx.x])
        .store((tag << kTileCountBits) | block_misses, ::cuda::memory_order_relaxed);
  }
  __syncthreads();  // the scan's shared memory is reused by the reduction

  unsigned long long before = 0;
  for (uint32_t t = threadIdx.x; t < blockIdx.x; t += kBlockThreads) {
    ::cuda::atomic_ref<TileStatus, ::cuda::thread_scope_device> published(status[t]);
    TileStatus word = published.load(::cuda::memory_order_relaxed);
    while ((word >> kTileCountBits) != tag) {
      __nanosleep(32);
      word = published.load(::cuda::memory_order_relaxed);
    }
    before += word & ((1ull << kTileCountBits) - 1);
  }
  before = Reduce(scratch.reduce).Sum(before);
  if (threadIdx.x == 0) misses_before = before;
  __syncthreads();

  uint64_t at = misses_before + offset;
#pragma unroll
  for (uint32_t k = 0; k < kFusedItems; ++k) {
    if (flags[k] == 0) continue;
    const uint32_t j = threadIdx.x * kFusedItems + k;
    missing_keys[at] = tile_keys[j];
    missing_positions[at] = first + j;
    ++at;
  }
  if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1) {
    const unsigned long long total = misses_before + block_misses;
    *miss_count = total;
    add_count(&c.counters->misses, total);
    add_count(&c.counters->hits, n - total);
  }
}

// Blocks of `kernel` (kBlockThreads threads) an SM holds at once, 1 to kMaxBlocksPerSm.
template <class Kernel>
uint32_t resident_blocks(Kernel kernel) {
  int blocks = 0;
  dynemb::core::cuda::check(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlockThreads, 0),
      "EmbeddingCache::query: cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return static_cast<uint32_t>(std::clamp<int>(blocks, 1, kMaxBlocksPerSm));
}

// Launches the unfused query kernel of one shape: as many blocks as are resident at once, or
// fewer when the windows of 32 keys run out.
template <class K, int R, int C, bool V4>
struct LaunchUnfused {
  static void run(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
    static const uint32_t resident = resident_blocks(query_kernel<K, R, C, V4>);
    const size_t windows = (q.n + kWarp - 1) / kWarp;
    const size_t blocks = std::min<size_t>((windows + kWarpsPerBlock - 1) / kWarpsPerBlock,
                                           q.grid_limit / kMaxBlocksPerSm * resident);
    query_kernel<K, R, C, V4><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
        c, q.n, q.keys, q.values, q.missed, q.stamp);
    dynemb::core::cuda::check(cudaGetLastError(), "EmbeddingCache::query: query_kernel launch");
  }
};

// Launches the fused query kernel of one shape, its tile sized so that all its blocks are
// resident at once. A call whose tiles hold one key a warp (up to 8 keys a block: calls of up to
// about 3K keys on an H100) takes the kernel that reads one key of a warp at a time: it holds
// fewer registers and runs fewer instructions than the one reading two keys at once, which only
// pays where a warp has keys to pair (a 2K-key call took about 1 us less on an H100).
template <class K, int R, int C, bool V4>
struct LaunchFused {
  template <int G>
  static void launch(const CacheView<K>& c, const QueryCall<K>& q, uint32_t tile,
                     cudaStream_t stream) {
    const uint64_t blocks = fused_query_blocks(q.n, tile);
    // Through the driver where it can be found: the runtime's launch adds about 0.5-1 us of host
    // time, most of a 2K-key call's (docs/cache.md, "What a small query costs").
    static DriverKernel kernel(reinterpret_cast<const void*>(&query_fused_kernel<K, R, C, V4, G>));
    const CUfunction function = kernel.on(q.device);
    if (function != nullptr) {
      // The kernel's parameters, in order.
      CacheView<K> view = c;
      size_t n = q.n;
      const K* keys = q.keys;
      float* values = q.values;
      K* missing_keys = q.missing_keys;
      uint64_t* missing_positions = q.missing_positions;
      uint64_t* miss_count = q.miss_count;
      TileStatus* status = q.status;
      unsigned long long tag = q.tag, stamp = q.stamp;
      unsigned long long* arrivals = q.arrivals;
      void* args[] = {
          &view,       &n,      &tile, &keys,  &values,  &missing_keys, &missing_positions,
          &miss_count, &status, &tag,  &stamp, &arrivals};
      if (q.graphs != nullptr &&
          q.graphs->launch(reinterpret_cast<const void*>(&query_fused_kernel<K, R, C, V4, G>),
                           static_cast<unsigned>(blocks), kBlockThreads, args, stream)) {
        return;
      }
      launch_through_driver(function, static_cast<unsigned>(blocks), kBlockThreads, args, stream,
                            "EmbeddingCache::query: query_fused_kernel launch");
      return;
    }
    query_fused_kernel<K, R, C, V4, G><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
        c, q.n, tile, q.keys, q.values, q.missing_keys, q.missing_positions, q.miss_count, q.status,
        q.tag, q.stamp, q.arrivals);
    dynemb::core::cuda::check(cudaGetLastError(),
                              "EmbeddingCache::query: query_fused_kernel launch");
  }

  static void run(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
    constexpr int kKeysAtOnce = group_keys<R, C, V4>();
    if constexpr (kKeysAtOnce > 1) {
      static const uint32_t resident_one = resident_blocks(query_fused_kernel<K, R, C, V4, 1>);
      const uint32_t tile = fused_query_tile(q.n, q.grid_limit / kMaxBlocksPerSm * resident_one);
      if (tile <= static_cast<uint32_t>(kWarpsPerBlock)) return launch<1>(c, q, tile, stream);
    }
    static const uint32_t resident = resident_blocks(query_fused_kernel<K, R, C, V4, kKeysAtOnce>);
    launch<kKeysAtOnce>(c, q, fused_query_tile(q.n, q.grid_limit / kMaxBlocksPerSm * resident),
                        stream);
  }
};

// Picks the row staging for the dim (float4 registers when rows and output are 16-byte aligned)
// and runs Launch<K, R, C, V4>.
template <template <class, int, int, bool> class Launch, class K, int R>
void dispatch_dim(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
  const bool vec4 = c.dim % 4 == 0 && reinterpret_cast<uintptr_t>(q.values) % 16 == 0;
  if (vec4 && c.dim <= 128) {
    Launch<K, R, 1, true>::run(c, q, stream);
  } else if (vec4 && c.dim <= 256) {
    Launch<K, R, 2, true>::run(c, q, stream);
  } else if (vec4 && c.dim <= 1024) {
    Launch<K, R, 8, true>::run(c, q, stream);
  } else if (c.dim <= 32) {
    Launch<K, R, 1, false>::run(c, q, stream);
  } else if (c.dim <= 128) {
    Launch<K, R, 4, false>::run(c, q, stream);
  } else if (c.dim <= 1024) {
    Launch<K, R, 32, false>::run(c, q, stream);
  } else {
    Launch<K, R, 0, false>::run(c, q, stream);
  }
}

template <template <class, int, int, bool> class Launch, class K>
void dispatch_ways(const CacheView<K>& c, const QueryCall<K>& q, cudaStream_t stream) {
  switch (c.ways) {
    case 32:
      return dispatch_dim<Launch, K, 1>(c, q, stream);
    case 64:
      return dispatch_dim<Launch, K, 2>(c, q, stream);
    default:
      return dispatch_dim<Launch, K, 4>(c, q, stream);
  }
}

// After a device-wide selection of the positions: the keys at those positions, and the counts.
template <class K>
__global__ void gather_missing_kernel(size_t n, const K* keys, const uint64_t* positions,
                                      const uint64_t* miss_count, K* missing_keys,
                                      DeviceCounters* counters) {
  const uint64_t m = *miss_count;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t k = tid; k < m; k += stride) missing_keys[k] = keys[positions[k]];
  if (tid == 0) {
    add_count(&counters->misses, m);
    add_count(&counters->hits, n - m);
  }
}

__global__ void scatter_rows_kernel(size_t n, const uint64_t* positions, const float* rows,
                                    uint32_t dim, float* out) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const size_t warps = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; i < n;
       i += warps) {
    float* dst = out + positions[i] * dim;
    const float* src = rows + i * dim;
    for (uint32_t e = lane; e < dim; e += kWarp) dst[e] = src[e];
  }
}

}  // namespace

template <class K>
void launch_query(const CacheView<K>& view, const QueryCall<K>& call, cudaStream_t stream) {
  if (call.n == 0) return;
  if (call.status != nullptr) {
    dispatch_ways<LaunchFused, K>(view, call, stream);
  } else {
    dispatch_ways<LaunchUnfused, K>(view, call, stream);
  }
}

template <class K>
void launch_compact_misses(const CacheView<K>& view, size_t n, const K* keys, const uint8_t* missed,
                           K* missing_keys, uint64_t* missing_positions, uint64_t* miss_count,
                           cudaStream_t stream) {
  thrust::counting_iterator<uint64_t> positions(0);
  size_t temp_bytes = 0;
  dynemb::core::cuda::check(
      cub::DeviceSelect::Flagged(nullptr, temp_bytes, positions, missed, missing_positions,
                                 miss_count, static_cast<int64_t>(n), stream),
      "EmbeddingCache::query: cub::DeviceSelect::Flagged (size)");
  const dynemb::core::cuda::DeviceArray<uint8_t> temp(temp_bytes, stream);
  dynemb::core::cuda::check(
      cub::DeviceSelect::Flagged(temp.data(), temp_bytes, positions, missed, missing_positions,
                                 miss_count, static_cast<int64_t>(n), stream),
      "EmbeddingCache::query: cub::DeviceSelect::Flagged");
  const size_t blocks = std::min<size_t>((n + kBlockThreads - 1) / kBlockThreads, 4096);
  gather_missing_kernel<K><<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(
      n, keys, missing_positions, miss_count, missing_keys, view.counters);
  dynemb::core::cuda::check(cudaGetLastError(),
                            "EmbeddingCache::query: gather_missing_kernel launch");
}

void launch_scatter_rows(size_t n, const uint64_t* positions, const float* rows, uint32_t dim,
                         float* out, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks = std::min<size_t>((n + kWarpsPerBlock - 1) / kWarpsPerBlock, 8192);
  scatter_rows_kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, stream>>>(n, positions,
                                                                                   rows, dim, out);
  dynemb::core::cuda::check(cudaGetLastError(), "scatter_rows_kernel launch");
}

template void launch_query<int32_t>(const CacheView<int32_t>&, const QueryCall<int32_t>&,
                                    cudaStream_t);
template void launch_compact_misses<int32_t>(const CacheView<int32_t>&, size_t, const int32_t*,
                                             const uint8_t*, int32_t*, uint64_t*, uint64_t*,
                                             cudaStream_t);
template void launch_query<int64_t>(const CacheView<int64_t>&, const QueryCall<int64_t>&,
                                    cudaStream_t);
template void launch_compact_misses<int64_t>(const CacheView<int64_t>&, size_t, const int64_t*,
                                             const uint8_t*, int64_t*, uint64_t*, uint64_t*,
                                             cudaStream_t);
template void launch_query<uint64_t>(const CacheView<uint64_t>&, const QueryCall<uint64_t>&,
                                     cudaStream_t);
template void launch_compact_misses<uint64_t>(const CacheView<uint64_t>&, size_t, const uint64_t*,
                                              const uint8_t*, uint64_t*, uint64_t*, uint64_t*,
                                              cudaStream_t);

}  // namespace dynemb::cache::detail

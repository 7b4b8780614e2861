// Launchers of the CUDA cache's kernels (src/cache/cuda/*.cu), called by CudaCache.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/view.hpp"

namespace dynemb::cache::detail {

class StreamGraphs;

// A tile's miss count as the fused query publishes it (query_kernels.cu): one 64-bit word, the
// call's tag above the count, so that one store publishes both and a reader that sees the tag
// sees the count.
using TileStatus = unsigned long long;
inline constexpr int kTileCountBits = 11;  // counts up to kMaxFusedTile
inline constexpr unsigned long long kTileTagMask = (1ull << (64 - kTileCountBits)) - 1;

// Batches up to this many keys are queried by the fused kernel (one launch, misses compacted in
// it); larger ones by the query kernel and a separate compaction.
inline constexpr size_t kFusedMaxKeys = 131072;
// Keys per block of the fused kernel at most, and per warp at least.
inline constexpr uint32_t kMaxFusedTile = 1024;
inline constexpr uint32_t kMinFusedTile = 8;
static_assert(kMaxFusedTile < (1u << kTileCountBits));

// Blocks of 256 threads an SM holds at most; a cache's grid limit is this many per SM.
inline constexpr uint32_t kMaxBlocksPerSm = 8;

// The fused kernel's keys per block for n keys: one key per warp while n fills grid_limit
// blocks that way, more per block beyond. The launcher passes the blocks of its kernel that are
// resident at once, so a call runs in one wave of blocks; fused_query_tile(n, the cache's grid
// limit) is the smallest tile, fused_query_blocks of it the most blocks, of any kernel.
inline uint32_t fused_query_tile(size_t n, uint32_t grid_limit) {
  const uint64_t spread = (n + grid_limit - 1) / grid_limit;
  return static_cast<uint32_t>(
      spread < kMinFusedTile ? kMinFusedTile : (spread > kMaxFusedTile ? kMaxFusedTile : spread));
}
// Its blocks (one TileStatus each).
inline uint64_t fused_query_blocks(size_t n, uint32_t tile) {
  return (n + tile - 1) / tile;
}
// The most blocks a fused query of up to kFusedMaxKeys keys launches.
inline uint64_t fused_query_max_blocks(uint32_t grid_limit) {
  const uint64_t widest = (kFusedMaxKeys + kMaxFusedTile - 1) / kMaxFusedTile;
  return grid_limit > widest ? grid_limit : widest;
}

// One query's arguments. Fused (status != nullptr): misses go to missing_keys /
// missing_positions in batch order, their count to *miss_count, hits and misses to the counters.
// Unfused: missed[i] = 1 for a miss (launch_compact_misses does the rest).
template <class K>
struct QueryCall {
  size_t n = 0;
  const K* keys = nullptr;
  float* values = nullptr;
  unsigned long long stamp = 0;  // the hits' new access stamp
  uint8_t* missed = nullptr;     // unfused
  uint32_t grid_limit = 0;       // blocks at most (kMaxBlocksPerSm per SM)
  K* missing_keys = nullptr;     // fused
  uint64_t* missing_positions = nullptr;
  uint64_t* miss_count = nullptr;
  // fused_query_blocks(n, fused_query_tile(n, grid_limit)) of them, uninitialized
  TileStatus* status = nullptr;
  // Unique to the call among the calls that share `status`, nonzero, at most kTileTagMask.
  unsigned long long tag = 0;
  // Fused, misses in any order (misses_in_batch_order off): the stream's arrival word (zero
  // between calls; the call's last block leaves it zero), else nullptr (batch order).
  unsigned long long* arrivals = nullptr;
  int device = 0;  // the cache's device (current during the call)
  // Fused: the stream's graphs, to launch the kernel as a graph (nullptr: a kernel launch).
  StreamGraphs* graphs = nullptr;
};

// An arrival word of the unordered fused query: blocks arrived above kArrivalShift, misses
// listed below.
inline constexpr int kArrivalShift = 40;
inline constexpr unsigned long long kArrivalMissMask = (1ull << kArrivalShift) - 1;

// Queries call.n keys: rows of hits to values, stamps hits with call.stamp.
template <class K>
void launch_query(const CacheView<K>& view, const QueryCall<K>& call, cudaStream_t stream);

// After an unfused query: writes the flagged keys and their positions compactly in batch order,
// *miss_count, and adds the call's hits and misses to the counters.
template <class K>
void launch_compact_misses(const CacheView<K>& view, size_t n, const K* keys, const uint8_t* missed,
                           K* missing_keys, uint64_t* missing_positions, uint64_t* miss_count,
                           cudaStream_t stream);

// What a write kernel does with each key.
enum class WriteKind : uint8_t { kReplace, kUpdate, kErase };

// Replaces, updates or erases n keys (values unused for erase); replace stamps key i with
// base_stamp + i.
template <class K>
void launch_write(const CacheView<K>& view, WriteKind kind, size_t n, const K* keys,
                  const float* values, uint64_t base_stamp, uint32_t grid_limit,
                  cudaStream_t stream);

// Empties every set (under its lock).
template <class K>
void launch_clear(const CacheView<K>& view, cudaStream_t stream);

// The first position whose key equals empty_key, or UINT64_MAX (synchronizes).
template <class K>
uint64_t find_sentinel(size_t n, const K* keys, K empty_key, cudaStream_t stream);

// Stored keys (synchronizes).
template <class K>
uint64_t count_stored(const CacheView<K>& view, cudaStream_t stream);

// Copies the stored keys and rows of sets [first_set, first_set + num_sets) compactly in slot
// order; returns how many (synchronizes).
template <class K>
uint64_t dump_sets(const CacheView<K>& view, uint64_t first_set, uint64_t num_sets, K* keys,
                   float* values, cudaStream_t stream);

// out[positions[i]] = rows[i] for i < n.
void launch_scatter_rows(size_t n, const uint64_t* positions, const float* rows, uint32_t dim,
                         float* out, cudaStream_t stream);

}  // namespace dynemb::cache::detail

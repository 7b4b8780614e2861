// The collection's combined batch on the GPU (include/dynemb/ops/table_keys.hpp).
#include <thrust/binary_search.h>
#include <thrust/execution_policy.h>

#include <algorithm>

#include "cuda/cuda_kernels.hpp"
#include "cuda/launch.cuh"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/ops/table_keys.hpp"

namespace dynemb::ops::detail {
namespace {

using ops::cuda::as_stream;
using ops::cuda::blocks_for_threads;
using ops::cuda::kBlock;

// Thread i < n writes combined key i; thread b <= num_bags writes combined offset b and checks
// the ends. The block ORs its keys' bits before one atomic, skipped when the status already has
// them (one atomic per warp on one word queued at L2: 42 us a table of 1.3M keys on the H100).
template <TableKey K>
__global__ void combine_kernel(uint32_t table, uint64_t tag, size_t n, const K* keys,
                               const int64_t* offsets, size_t num_bags, uint64_t base,
                               uint64_t bag_base, uint64_t* combined_keys,
                               int64_t* combined_offsets, unsigned long long* status) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t seen = 0;
  if (i < n) {
    const uint64_t bits = key_bits(keys[i]);
    seen = bits;
    combined_keys[base + i] = bits | tag;
  }
  if (i <= num_bags) {
    const int64_t o = offsets[i];
    const int64_t last = static_cast<int64_t>(n);
    combined_offsets[bag_base + i] =
        (o < 0 ? 0 : (o > last ? last : o)) + static_cast<int64_t>(base);
    const bool bad =
        (i == 0 && o != 0) || (i == num_bags && o != last) || (i > 0 && o < offsets[i - 1]);
    if (bad) atomicMax(status + kBadTableFlag, ~0ull - table);
  }
  for (int offset = 16; offset > 0; offset /= 2) seen |= __shfl_xor_sync(0xFFFFFFFFu, seen, offset);
  __shared__ uint64_t warp_seen[kBlock / 32];
  if (ops::cuda::lane_index() == 0) warp_seen[threadIdx.x / 32] = seen;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (uint32_t w = 1; w < blockDim.x / 32; ++w) seen |= warp_seen[w];
  // Bits are only ever added, so bits already there need no atomic.
  const auto* current = reinterpret_cast<const volatile unsigned long long*>(status + kKeyBitsSeen);
  if ((seen & ~static_cast<uint64_t>(*current)) != 0) atomicOr(status + kKeyBitsSeen, seen);
}

// combine_tables_narrow's tables, by value (kMaxNarrowTables of them at most).
struct NarrowTables {
  uint32_t count = 0;
  uint32_t shift = 64;
  uint64_t n = 0, bags = 0, entries = 0;  // ids, bags, and offsets entries over all tables
  const uint64_t* keys[kMaxNarrowTables];
  const int64_t* offsets[kMaxNarrowTables];
  // Table t's first id, first bag and first offsets entry (index count: the totals).
  uint64_t base[kMaxNarrowTables + 1], bag_base[kMaxNarrowTables + 1];
  uint64_t entry_base[kMaxNarrowTables + 1];
  // Whether table t's last offset is written: not when a later table with bags writes its first
  // offset to the same combined entry (as the per-table passes, one after the other, leave it).
  bool writes_end[kMaxNarrowTables];
  uint32_t* narrow_keys = nullptr;
  uint32_t* bag_of = nullptr;  // null: not written
  int64_t* combined_offsets = nullptr;
  unsigned long long* status = nullptr;
};

// The table whose range of `starts` holds x, from t on (x never decreases along a thread's loop).
__device__ __forceinline__ uint32_t table_from(uint32_t t, uint64_t x, const uint64_t* starts,
                                               uint32_t count) {
  while (t + 1 < count && x >= starts[t + 1]) ++t;
  return t;
}

// Each id's narrow combined key, grid-stride, kUnroll keys a thread loaded before any is stored
// (more loads in flight a warp); returns the OR of the keys' bits.
__device__ uint64_t narrow_keys(const NarrowTables& c, size_t first, size_t stride) {
  constexpr int kUnroll = 4;
  uint64_t seen = 0;
  uint32_t t = 0;
  for (size_t i0 = first; i0 < c.n; i0 += stride * kUnroll) {
    uint64_t bits[kUnroll];
    uint32_t table[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t i = i0 + k * stride;
      bits[k] = 0;
      table[k] = t;
      if (i < c.n) {
        t = table_from(t, i, c.base, c.count);
        table[k] = t;
        bits[k] = c.keys[t][i - c.base[t]];
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t i = i0 + k * stride;
      if (i < c.n) {
        seen |= bits[k];
        c.narrow_keys[i] = static_cast<uint32_t>(bits[k] | table_tag(table[k], c.shift));
      }
    }
  }
  return seen;
}

// Each id's bag, a warp 32 bags at a time: each lane loads one bag's offsets, then the warp
// writes the 32 bags' ids one bag after the other (one wait on the offsets a 32 bags, not a bag).
__device__ void bags_by_32(const NarrowTables& c, size_t first, size_t stride) {
  const uint32_t lane = ops::cuda::lane_index();
  for (size_t g0 = (first / 32) * 32; g0 < c.bags; g0 += stride) {
    const size_t g = g0 + lane;
    uint64_t begin = 0, end = 0;  // global ids
    if (g < c.bags) {
      const uint32_t t = table_from(0, g, c.bag_base, c.count);
      const uint64_t b = g - c.bag_base[t];
      const int64_t* offsets = c.offsets[t];
      const auto last = static_cast<int64_t>(c.base[t + 1] - c.base[t]);
      const int64_t lo = max(min(offsets[b], last), int64_t{0});
      const int64_t hi = max(min(offsets[b + 1], last), int64_t{0});
      begin = c.base[t] + static_cast<uint64_t>(lo);
      end = c.base[t] + static_cast<uint64_t>(max(hi, lo));
    }
    const uint32_t count = static_cast<uint32_t>(c.bags - g0 < 32 ? c.bags - g0 : 32);
    for (uint32_t j = 0; j < count; ++j) {
      const uint64_t bag_begin = __shfl_sync(0xFFFFFFFFu, begin, j);
      const uint64_t bag_end = __shfl_sync(0xFFFFFFFFu, end, j);
      for (uint64_t i = bag_begin + lane; i < bag_end; i += 32) {
        c.bag_of[i] = static_cast<uint32_t>(g0 + j);
      }
    }
  }
}

// combine_kernel of every table at once, grid-stride: each id's narrow combined key (and the OR
// of the keys' bits), each offsets entry with its checks, and each id's bag (narrow_keys,
// bags_by_32). (__grid_constant__: the tables' arrays are indexed in the parameter space, not
// copied.)
__global__ void combine_narrow_kernel(const __grid_constant__ NarrowTables c) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t seen = narrow_keys(c, first, stride);
  uint32_t t = 0;
  for (size_t j = first; j < c.entries; j += stride) {
    t = table_from(t, j, c.entry_base, c.count);
    const uint64_t b = j - c.entry_base[t];
    const uint64_t num_bags = c.bag_base[t + 1] - c.bag_base[t];
    const int64_t* offsets = c.offsets[t];
    const int64_t o = offsets[b];
    const auto last = static_cast<int64_t>(c.base[t + 1] - c.base[t]);
    if (b < num_bags || c.writes_end[t]) {
      c.combined_offsets[c.bag_base[t] + b] =
          (o < 0 ? 0 : (o > last ? last : o)) + static_cast<int64_t>(c.base[t]);
    }
    const bool bad =
        (b == 0 && o != 0) || (b == num_bags && o != last) || (b > 0 && o < offsets[b - 1]);
    if (bad) atomicMax(c.status + kBadTableFlag, ~0ull - t);
  }
  if (c.bag_of != nullptr) bags_by_32(c, first, stride);
  for (int offset = 16; offset > 0; offset /= 2) seen |= __shfl_xor_sync(0xFFFFFFFFu, seen, offset);
  __shared__ uint64_t warp_seen[kBlock / 32];
  if (ops::cuda::lane_index() == 0) warp_seen[threadIdx.x / 32] = seen;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (uint32_t w = 1; w < blockDim.x / 32; ++w) seen |= warp_seen[w];
  const auto* current =
      reinterpret_cast<const volatile unsigned long long*>(c.status + kKeyBitsSeen);
  if ((seen & ~static_cast<uint64_t>(*current)) != 0) atomicOr(c.status + kKeyBitsSeen, seen);
}

template <TableKey K>
__global__ void split_kernel(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                             uint32_t shift, K* keys, uint64_t* bounds) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < u) keys[i] = static_cast<K>(unique_keys[i] & id_mask(shift));
  if (i <= num_tables) {
    bounds[i] = i == num_tables ? u
                                : thrust::lower_bound(thrust::seq, unique_keys, unique_keys + u,
                                                      table_tag(i, shift)) -
                                      unique_keys;
  }
}

// Whether the combined batch is refused (a flagged table, or a key wider than key_limit).
__device__ bool spread_refused(const TableSpread& s) {
  if (s.status[kBadTableFlag] != 0) return true;
  return s.key_limit < 64 && (s.status[kKeyBitsSeen] >> s.key_limit) != 0;
}

// Warp t <= T: table t's first row (bounds: the first unique row with t's tag; u for T), by a
// search of 32 probes a step (a ballot of the probes' keys at or above the tag): about 5
// dependent loads for 2^21 rows, where a binary search by one thread waits on 21.
__global__ void bounds_kernel(TableSpread s) {
  const size_t t = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (t > s.num_tables) return;
  const uint32_t lane = ops::cuda::lane_index();
  const size_t u = *s.unique_count;
  if (t == s.num_tables) {
    if (lane == 0) s.bounds[t] = u;
    return;
  }
  const uint64_t tag = table_tag(static_cast<uint32_t>(t), s.shift);
  const uint64_t* keys = s.unique_combined;
  // The first row whose key is >= tag lies in [lo, hi] (hi = u: none).
  size_t lo = 0, hi = u;
  while (hi - lo > 32) {
    const size_t step = (hi - lo + 31) / 32;
    const size_t p = lo + lane * step;
    const unsigned at_or_above = __ballot_sync(0xFFFFFFFFu, p >= hi || keys[p] >= tag);
    if (at_or_above == 0) {
      lo = lo + 31 * step + 1;
    } else {
      const uint32_t j = __ffs(at_or_above) - 1;
      hi = min(hi, lo + j * step);
      if (j > 0) lo = lo + (j - 1) * step + 1;
    }
  }
  const size_t p = lo + lane;
  const unsigned at_or_above = __ballot_sync(0xFFFFFFFFu, p >= hi || keys[p] >= tag);
  if (lane == 0) s.bounds[t] = at_or_above == 0 ? hi : lo + (__ffs(at_or_above) - 1);
}

// After bounds_kernel, grid-stride: thread t < T writes table t's count and unique counter (the
// batch's refusal counted once); rows r < u (u: a count the device holds) get their key stripped
// and, unless refused, moved to its padded place (the row's table found by its tag). Grid-stride
// over the u rows: a grid for the bound n leaves most threads idle (u is a fraction of n).
__global__ void spread_rows_kernel(TableSpread s) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool refused = spread_refused(s);
  for (size_t t = first; t < s.num_tables; t += stride) {
    const uint64_t count = refused ? 0 : s.bounds[t + 1] - s.bounds[t];
    s.counts[t] = count;
    s.counters[t * s.counter_stride + s.unique_index] += count;
    s.counters[t * s.counter_stride + s.lookups_index] += s.id_base[t + 1] - s.id_base[t];
    if (t == 0 && refused) *s.refused += 1;
  }
  const size_t u = *s.unique_count;
  const uint64_t mask = id_mask(s.shift);
  for (size_t i = first; i < u; i += stride) {
    const uint64_t combined = s.unique_combined[i];
    const uint64_t key = combined & mask;
    s.keys[i] = key;
    if (refused) continue;
    const uint32_t t = s.shift >= 64 ? 0 : static_cast<uint32_t>(combined >> s.shift);
    s.padded_keys[s.id_base[t] + (i - s.bounds[t])] = key;
  }
}

// Adds the lanes of the warp whose `flag` is set to counter `index` of their table t, one atomic
// per table the warp's flagged lanes hold (every lane of the warp calls it).
__device__ void count_by_table(const TableRows& r, bool flag, uint32_t t, uint32_t index) {
  const unsigned flagged = __ballot_sync(0xFFFFFFFFu, flag);
  if (!flag) return;
  const unsigned peers = __match_any_sync(flagged, t);
  if (ops::cuda::lane_index() != static_cast<uint32_t>(__ffs(peers) - 1)) return;
  auto* counters = reinterpret_cast<unsigned long long*>(r.counters + size_t{t} * r.counter_stride);
  atomicAdd(counters + index, static_cast<unsigned long long>(__popc(peers)));
}

// The gather, walked from the rows, grid-stride: each row r < u (not refused) from its
// padded entry id_base[t] + r - bounds[t] (t: the table whose rows hold r), then the padding rows
// [u, n) (every row of a refused batch). No thread for a padded entry without a row (u is about a
// sixth of n in the 13m shape).
__global__ void gather_rows_kernel(TableSpread s, TableRows r) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint32_t lane = ops::cuda::lane_index();
  const size_t u = *s.unique_count;
  const size_t live = spread_refused(s) ? 0 : u;
  // Whole warps go round together (count_by_table is a warp's vote).
  for (size_t warp_row = first - lane; warp_row < live; warp_row += stride) {
    const size_t row = warp_row + lane;
    bool created = false, missed = false;
    uint32_t t = 0;
    if (row < live) {
      t = static_cast<uint32_t>(
          thrust::upper_bound(thrust::seq, s.bounds + 1, s.bounds + s.num_tables, uint64_t{row}) -
          (s.bounds + 1));
      const uint64_t p = s.id_base[t] + (row - s.bounds[t]);
      float* address = r.padded_rows[p];
      const bool none = address == nullptr;
      r.rows[row] = none ? r.fallback + row * r.fallback_stride : address;
      r.missing[row] = none;
      created = r.training && !none && !r.padded_founds[p];
      missed = !r.training && none;
    }
    count_by_table(r, created, t, r.created_index);
    count_by_table(r, missed, t, r.missing_index);
  }
  for (size_t p = live + first; p < s.n; p += stride) {
    if (r.padding_rows || p < u) {  // p < u: a refused batch's rows
      r.rows[p] = r.fallback + p * r.fallback_stride;
      r.missing[p] = true;
    }
    if (p >= u) r.row_begin[p + 1] = static_cast<uint32_t>(s.n);
  }
}

}  // namespace

bool combine_tables_narrow_cuda(std::span<const TableBatch> tables, uint32_t shift, bool bags,
                                int64_t* combined_offsets, uint64_t* status,
                                StepWorkspace& workspace, StreamHandle stream) {
  if (tables.empty() || tables.size() > kMaxNarrowTables) return false;
  NarrowTables c;
  c.count = static_cast<uint32_t>(tables.size());
  c.shift = shift;
  c.base[0] = c.bag_base[0] = c.entry_base[0] = 0;
  for (uint32_t t = 0; t < c.count; ++t) {
    const TableBatch& b = tables[t];
    c.keys[t] = b.keys;
    c.offsets[t] = b.offsets;
    c.base[t + 1] = c.base[t] + b.num_ids;
    c.bag_base[t + 1] = c.bag_base[t] + b.num_bags;
    c.entry_base[t + 1] = c.entry_base[t] + (b.num_bags > 0 ? b.num_bags + 1 : 0);
    c.writes_end[t] = true;
    if (b.num_bags > 0) {
      for (uint32_t before = 0; before < t; ++before) c.writes_end[before] = false;
    }
  }
  c.n = c.base[c.count];
  c.bags = c.bag_base[c.count];
  c.entries = c.entry_base[c.count];
  c.narrow_keys = workspace.narrow_keys(c.n, stream);
  c.bag_of = bags && c.bags > 0 ? workspace.bag_of(c.n, stream) : nullptr;
  c.combined_offsets = combined_offsets;
  c.status = reinterpret_cast<unsigned long long*>(status);
  const size_t threads = std::max<size_t>({c.n, c.entries, c.bags * 32});
  if (threads == 0) return true;
  // A few waves of resident blocks (8 of 256 threads a multiprocessor, 132 on the H100): each
  // thread about 3 rounds of 4 keys, each warp at most one group of 32 bags in the 13m shape.
  const auto blocks = static_cast<unsigned>(std::min<size_t>(blocks_for_threads(threads), 4096));
  combine_narrow_kernel<<<blocks, kBlock, 0, as_stream(stream)>>>(c);
  core::cuda::check_launch("combine_tables_narrow");
  return true;
}

void spread_table_keys_cuda(const TableSpread& s, StreamHandle stream) {
  const size_t threads = std::max(s.n, size_t{s.num_tables} + 1);
  bounds_kernel<<<blocks_for_threads((size_t{s.num_tables} + 1) * 32), kBlock, 0,
                  as_stream(stream)>>>(s);
  core::cuda::check_launch("spread_table_keys: bounds");
  const auto blocks = static_cast<unsigned>(std::min<size_t>(blocks_for_threads(threads), 1024));
  spread_rows_kernel<<<blocks, kBlock, 0, as_stream(stream)>>>(s);
  core::cuda::check_launch("spread_table_keys");
}

void gather_table_rows_cuda(const TableSpread& s, const TableRows& r, StreamHandle stream) {
  if (s.n == 0) return;
  // At most 2048 blocks walking the rows grid-stride: a thread a padded entry (n, about six
  // times the rows in the 13m shape) was 0.09 ms slower a forward (issue 35's final call).
  const auto blocks = static_cast<unsigned>(std::min<size_t>(blocks_for_threads(s.n), 2048));
  gather_rows_kernel<<<blocks, kBlock, 0, as_stream(stream)>>>(s, r);
  core::cuda::check_launch("gather_table_rows");
}

template <TableKey K>
void combine_table_keys_cuda(uint32_t table, uint32_t shift, size_t n, const K* keys,
                             const int64_t* offsets, size_t num_bags, uint64_t base,
                             uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                             uint64_t* status, StreamHandle stream) {
  const size_t threads = n > num_bags + 1 ? n : num_bags + 1;
  combine_kernel<K><<<blocks_for_threads(threads), kBlock, 0, as_stream(stream)>>>(
      table, table_tag(table, shift), n, keys, offsets, num_bags, base, bag_base, combined_keys,
      combined_offsets, reinterpret_cast<unsigned long long*>(status));
  core::cuda::check_launch("combine_table_keys");
}

template <TableKey K>
void split_table_keys_cuda(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                           uint32_t shift, K* keys, uint64_t* bounds, StreamHandle stream) {
  const size_t threads = u > size_t{num_tables} + 1 ? u : size_t{num_tables} + 1;
  split_kernel<K><<<blocks_for_threads(threads), kBlock, 0, as_stream(stream)>>>(
      u, unique_keys, num_tables, shift, keys, bounds);
  core::cuda::check_launch("split_table_keys");
}

template void combine_table_keys_cuda<int64_t>(uint32_t, uint32_t, size_t, const int64_t*,
                                               const int64_t*, size_t, uint64_t, uint64_t,
                                               uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void combine_table_keys_cuda<uint64_t>(uint32_t, uint32_t, size_t, const uint64_t*,
                                                const int64_t*, size_t, uint64_t, uint64_t,
                                                uint64_t*, int64_t*, uint64_t*, StreamHandle);
template void split_table_keys_cuda<int64_t>(size_t, const uint64_t*, uint32_t, uint32_t, int64_t*,
                                             uint64_t*, StreamHandle);
template void split_table_keys_cuda<uint64_t>(size_t, const uint64_t*, uint32_t, uint32_t,
                                              uint64_t*, uint64_t*, StreamHandle);

}  // namespace dynemb::ops::detail

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

// split_kernel on a count the device holds: thread i < u strips row i's key, thread t <= T
// finds table t's first row.
__global__ void split_counted_kernel(TableSpread s) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t u = *s.unique_count;
  if (i < u) s.keys[i] = s.unique_combined[i] & id_mask(s.shift);
  if (i <= s.num_tables) {
    s.bounds[i] = i == s.num_tables
                      ? u
                      : thrust::lower_bound(thrust::seq, s.unique_combined, s.unique_combined + u,
                                            table_tag(static_cast<uint32_t>(i), s.shift)) -
                            s.unique_combined;
  }
}

// Thread t < T: table t's count and unique counter; the batch's refusal counted once. Threads
// r < u: row r's key to its padded place (the row's table found by its tag).
__global__ void spread_kernel(TableSpread s) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool refused = spread_refused(s);
  if (i < s.num_tables) {
    const uint64_t count = refused ? 0 : s.bounds[i + 1] - s.bounds[i];
    s.counts[i] = count;
    s.counters[i * s.counter_stride + s.unique_index] += count;
    s.counters[i * s.counter_stride + s.lookups_index] += s.id_base[i + 1] - s.id_base[i];
    if (i == 0 && refused) *s.refused += 1;
  }
  const size_t u = *s.unique_count;
  if (refused || i >= u) return;
  const uint32_t t = s.shift >= 64 ? 0 : static_cast<uint32_t>(s.unique_combined[i] >> s.shift);
  s.padded_keys[s.id_base[t] + (i - s.bounds[t])] = s.keys[i];
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

// Thread p < n: padded entry p (its table: the one whose ids' range holds p) back to its row; then
// row p itself when no table answered it (padding, or a refused batch). The rows created and the
// rows missing are counted a warp at a time (count_by_table), not one atomic each.
__global__ void gather_kernel(TableSpread s, TableRows r) {
  const size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool created = false, missed = false;
  uint32_t t = 0;
  if (p < s.n) {
    // The table whose ids' range holds p (the last t with id_base[t] <= p): the same table as
    // id p's combined key names, without reading the keys.
    t = static_cast<uint32_t>(
        thrust::upper_bound(thrust::seq, s.id_base + 1, s.id_base + s.num_tables, uint64_t{p}) -
        (s.id_base + 1));
    if (p - s.id_base[t] < s.counts[t]) {
      const uint64_t j = p - s.id_base[t];
      const uint64_t row = s.bounds[t] + j;
      float* address = r.padded_rows[p];
      const bool none = address == nullptr;
      r.rows[row] = none ? r.fallback + row * r.fallback_stride : address;
      r.missing[row] = none;
      created = r.training && !none && !r.padded_founds[p];
      missed = !r.training && none;
    }
  }
  count_by_table(r, created, t, r.created_index);
  count_by_table(r, missed, t, r.missing_index);
  if (p >= s.n) return;
  const size_t u = *s.unique_count;
  const size_t first = spread_refused(s) ? 0 : u;
  if (p >= first) {
    r.rows[p] = r.fallback + p * r.fallback_stride;
    r.missing[p] = true;
    if (p >= u) r.row_begin[p + 1] = static_cast<uint32_t>(s.n);
  }
}

}  // namespace

void spread_table_keys_cuda(const TableSpread& s, StreamHandle stream) {
  const size_t threads = std::max(s.n, size_t{s.num_tables} + 1);
  split_counted_kernel<<<blocks_for_threads(threads), kBlock, 0, as_stream(stream)>>>(s);
  core::cuda::check_launch("spread_table_keys: split");
  spread_kernel<<<blocks_for_threads(threads), kBlock, 0, as_stream(stream)>>>(s);
  core::cuda::check_launch("spread_table_keys");
}

void gather_table_rows_cuda(const TableSpread& s, const TableRows& r, StreamHandle stream) {
  if (s.n == 0) return;
  gather_kernel<<<blocks_for_threads(s.n), kBlock, 0, as_stream(stream)>>>(s, r);
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

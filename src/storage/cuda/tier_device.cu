// TierDevice on the CUDA backend: scratch in device memory kept across calls, host copies staged
// through pinned memory and issued asynchronously on the caller's stream, the batch passes as
// kernels, and a non-blocking stream of the table's own (the highest priority) for prefetch.
#include <cuda_runtime_api.h>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <map>
#include <mutex>

#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_array.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#include "dynemb/core/hash.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/core/key.hpp"
#include "key_filter.hpp"
#include "tier_device.hpp"

namespace dynemb::storage::detail {
namespace {

using core::cuda::check;
using core::cuda::check_launch;
using core::cuda::DeviceArray;

constexpr int kBlock = 256;

cudaStream_t as_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}

unsigned blocks_for(size_t work) {
  return static_cast<unsigned>(std::clamp<size_t>((work + kBlock - 1) / kBlock, 1, 65535));
}

struct NotFound {
  const bool* found;
  __device__ bool operator()(uint32_t i) const { return !found[i]; }
};

__global__ void fill_kernel(size_t n, uint64_t value, uint64_t* dst) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    dst[i] = value;
}

// out[j] = keys[positions[j]] for j < *count (the count only the device knows yet).
__global__ void gather_keys_kernel(const uint32_t* count, const uint32_t* positions,
                                   const uint64_t* keys, uint64_t* out) {
  const size_t m = *count;
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < m;
       j += size_t{gridDim.x} * blockDim.x)
    out[j] = keys[positions[j]];
}

// out[j] = j for j < *count.
__global__ void iota_kernel(const uint32_t* count, uint32_t* out) {
  const size_t m = *count;
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < m;
       j += size_t{gridDim.x} * blockDim.x)
    out[j] = static_cast<uint32_t>(j);
}

// heads[i] = 1 where sorted[i] starts a run of equal keys, else 0.
__global__ void run_heads_kernel(size_t m, const uint64_t* sorted, uint32_t* heads) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < m;
       i += size_t{gridDim.x} * blockDim.x)
    heads[i] = i == 0 || sorted[i] != sorted[i - 1] ? 1u : 0u;
}

// From the sorted missed keys (stable: a run's order values ascend) and runs[i] = 1 + the run's
// index: each missed entry's distinct index, and each distinct key with its first and last batch
// position; *distinct = the number of runs.
__global__ void distinct_kernel(size_t m, const uint64_t* sorted, const uint32_t* order,
                                const uint32_t* runs, const uint32_t* positions, uint32_t* index,
                                uint64_t* unique, uint32_t* first, uint32_t* last,
                                uint32_t* distinct) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < m;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint32_t r = runs[i] - 1;
    const uint32_t j = order[i];
    index[j] = r;
    if (i == 0 || sorted[i] != sorted[i - 1]) {
      unique[r] = sorted[i];
      first[r] = positions[j];
    }
    if (i == m - 1 || sorted[i + 1] != sorted[i]) last[r] = positions[j];
    if (i == m - 1) *distinct = r + 1;
  }
}

// Sets the filter bits of keys[i < n].
__global__ void filter_add_kernel(size_t n, const uint64_t* keys, unsigned long long* words,
                                  uint32_t log2_bits) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint64_t a = 0, b = 0;
    filter_bits(keys[i], log2_bits, a, b);
    atomicOr(words + (a >> 6), 1ull << (a & 63));
    atomicOr(words + (b >> 6), 1ull << (b & 63));
  }
}

// maybe[k] = whether unique[k] may be in the filter, k < *count.
__global__ void filter_maybe_kernel(const uint32_t* count, const uint64_t* unique,
                                    const unsigned long long* words, uint32_t log2_bits,
                                    uint8_t* maybe) {
  const size_t m = *count;
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < m;
       k += size_t{gridDim.x} * blockDim.x)
    maybe[k] = filter_may_hold(reinterpret_cast<const uint64_t*>(words), log2_bits, unique[k]);
}

// Row p of dst = row index[p] of host (pinned host memory, read over the bus): a thread a word.
__global__ void gather_host_rows_kernel(size_t m, const uint32_t* index, const uint32_t* host,
                                        uint32_t dim, uint32_t* dst) {
  const size_t total = m * dim;
  for (size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x; t < total;
       t += size_t{gridDim.x} * blockDim.x) {
    const size_t p = t / dim, w = t % dim;
    dst[t] = host[size_t{index[p]} * dim + w];
  }
}

// dst[0, dim) = src[0, dim) by the 32 lanes of a warp: 16 bytes a lane where both are 16-byte
// aligned and dim a multiple of 4 (a row of 128 floats in one step), else 4 bytes a lane.
__device__ void copy_row_by_warp(const float* src, uint32_t dim, float* dst, uint32_t lane) {
  const bool vector = dim % 4 == 0 && (reinterpret_cast<uintptr_t>(src) % 16) == 0 &&
                      (reinterpret_cast<uintptr_t>(dst) % 16) == 0;
  if (vector) {
    const auto* s4 = reinterpret_cast<const float4*>(src);
    auto* d4 = reinterpret_cast<float4*>(dst);
    for (uint32_t q = lane; q < dim / 4; q += 32) d4[q] = s4[q];
    return;
  }
  for (uint32_t c = lane; c < dim; c += 32) dst[c] = src[c];
}

// values + at(j) * dim = *rows[j] for rows[j] != nullptr, j < m, where at(j) = positions[j], or j
// without positions: a warp per row.
__global__ void copy_rows_kernel(size_t m, const uint32_t* positions, float* const* rows,
                                 uint32_t dim, float* values) {
  const size_t warps = size_t{gridDim.x} * (blockDim.x / 32);
  const uint32_t lane = threadIdx.x % 32;
  for (size_t j = (blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32; j < m; j += warps) {
    const float* row = rows[j];
    if (row == nullptr) continue;
    float* out = values + (positions != nullptr ? size_t{positions[j]} : j) * dim;
    copy_row_by_warp(row, dim, out, lane);
  }
}

// Words [4g, 4g + 4) of the initial row of `key` (those below dim) to row + 4g: uniform float32
// rows draw one Philox block for the four (initial_value draws the same block for each of them),
// other initializers take initial_word per word; one 16-byte store when `vector`.
__device__ void initial_word_group(const InitializerOptions& init, uint64_t key, uint32_t g,
                                   uint32_t dim, bool vector, uint32_t* row) {
  const uint32_t j0 = 4 * g;
  uint32_t w[4] = {0, 0, 0, 0};
  if (init.value_type == ValueType::kFloat32 && init.kind == InitializerKind::kUniform) {
    if (init.width == 0 || j0 < init.width) {
      const Philox4 r = init_detail::draw(init, key, g, init_detail::kUniformStream);
      const float span = det::sub(init.high, init.low);
      for (uint32_t k = 0; k < 4; ++k) {
        const bool zero = init.width != 0 && j0 + k >= init.width;
        w[k] = zero ? 0u : __float_as_uint(det::fma(uniform01(r.w[k]), span, init.low));
      }
    }
  } else {
    for (uint32_t k = 0; k < 4 && j0 + k < dim; ++k) w[k] = initial_word(init, key, j0 + k);
  }
  if (vector) {
    *reinterpret_cast<uint4*>(row + j0) = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
  for (uint32_t k = 0; k < 4 && j0 + k < dim; ++k) row[j0 + k] = w[k];
}

// Rows [first, m) = the initial rows of keys[first, m): a warp per row, a lane per four words
// (a block per row and a thread per word spent its time starting blocks and drawing each Philox
// block four times).
__device__ void initial_rows_by_warp(size_t first, size_t m, const uint64_t* keys,
                                     const InitializerOptions& init, uint32_t dim, uint32_t* rows) {
  const size_t warps = size_t{gridDim.x} * (blockDim.x / 32);
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t groups = (dim + 3) / 4;
  // 16-byte stores where every row starts 16-byte aligned (rows: scratch, 256-byte aligned).
  const bool vector = dim % 4 == 0 && reinterpret_cast<uintptr_t>(rows) % 16 == 0;
  for (size_t j = first + (blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32; j < m; j += warps) {
    const uint64_t key = keys[j];
    for (uint32_t g = lane; g < groups; g += 32)
      initial_word_group(init, key, g, dim, vector, rows + j * dim);
  }
}

__global__ void initial_rows_from_kernel(size_t first, size_t m, const uint64_t* keys,
                                         InitializerOptions init, uint32_t dim, uint32_t* rows) {
  initial_rows_by_warp(first, m, keys, init, dim, rows);
}

// Blocks for a warp-per-row launch over `rows` rows (striding when there are more).
unsigned blocks_for_rows(size_t rows) {
  return static_cast<unsigned>(
      std::clamp<size_t>((rows + kBlock / 32 - 1) / (kBlock / 32), 1, 65535));
}

// A set of distinct keys hashed into `slots` words (a power of two; ~0, a reserved key, marks an
// empty one), probed linearly: stage_new_keys' distinct missed keys without a sort.
constexpr unsigned long long kSetEmpty = ~0ull;

__device__ size_t set_slot_of(uint64_t key, size_t slots) {
  return hash_key_bits(key ^ 0x3C6EF372FE94F82Bull) & (slots - 1);
}

// The set's slot holding `key`, or `slots` when it holds none.
__device__ size_t set_find(const uint64_t* set, size_t slots, uint64_t key) {
  for (size_t pos = set_slot_of(key, slots);; pos = (pos + 1) & (slots - 1)) {
    const uint64_t at = set[pos];
    if (at == key) return pos;
    if (at == kSetEmpty) return slots;
  }
}

__device__ bool set_holds(const uint64_t* set, size_t slots, uint64_t key) {
  return set_find(set, slots, key) < slots;
}

// Each slot's key's first missed position in the batch (after the keys, cleared to ~0 with them;
// stage_hash_kernel), then its index in the unique list (staged_set_bytes).
__device__ uint32_t* set_first(unsigned long long* set, size_t slots) {
  return reinterpret_cast<uint32_t*>(set + slots);
}
__device__ const uint32_t* set_first(const uint64_t* set, size_t slots) {
  return reinterpret_cast<const uint32_t*>(set + slots);
}
__device__ uint32_t* set_index(unsigned long long* set, size_t slots) {
  return set_first(set, slots) + slots;
}
__device__ const uint32_t* set_index(const uint64_t* set, size_t slots) {
  return set_first(set, slots) + slots;
}

// The distinct missed keys of the batch into the set, each appended to unique[*count] by the
// thread that put it there (the count taken once a warp: one atomic a thread serialized on one
// word took 25 us for 65K keys on an H100), each missed position's key with its first position
// (set_first, by atomicMin), the missed positions counted and a missed reserved key flagged in
// status. (Taking the count once a block instead measured no faster: 117 us against 106 us for
// a 1M-key call under ncu.)
__global__ void stage_hash_kernel(size_t n, const uint64_t* keys, const bool* found,
                                  unsigned long long* set, size_t slots, uint64_t* unique,
                                  uint32_t* count, unsigned long long* status) {
  unsigned long long missed = 0, why = 0;
  const uint32_t lane = threadIdx.x % 32;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t end = (n + 31) / 32 * 32;  // whole warps each turn (the count is taken a warp)
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < end; i += stride) {
    bool fresh = false;
    uint64_t key = 0;
    size_t at = 0;  // the slot this thread put its key in (fresh)
    if (i < n) {
      key = keys[i];
      const bool reserved = key >= kFirstReservedKey;
      if (!found[i]) {
        ++missed;
        if (reserved) {
          why |= TierDevice::kReservedMissed;
        } else {
          size_t pos = set_slot_of(key, slots);
          for (;; pos = (pos + 1) & (slots - 1)) {
            const unsigned long long was = atomicCAS(set + pos, kSetEmpty, key);
            if (was == kSetEmpty) {
              fresh = true;
              at = pos;
              break;
            }
            if (was == key) break;
          }
          atomicMin(set_first(set, slots) + pos, static_cast<uint32_t>(i));
        }
      }
    }
    const uint32_t mask = __ballot_sync(~0u, fresh);
    if (mask == 0) continue;
    const int leader = __ffs(mask) - 1;
    uint32_t base = 0;
    if (static_cast<int>(lane) == leader) base = atomicAdd(count, __popc(mask));
    base = __shfl_sync(~0u, base, leader);
    if (fresh) {
      const uint32_t k = base + __popc(mask & ((1u << lane) - 1));
      unique[k] = key;
      set_index(set, slots)[at] = k;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    missed += __shfl_down_sync(~0u, missed, offset);
    why |= __shfl_down_sync(~0u, why, offset);
  }
  if (lane != 0) return;
  if (missed != 0) atomicAdd(status + TierDevice::kStageMissed, missed);
  if (why != 0) atomicOr(status + TierDevice::kStageWhy, why);
}

// values + i * dim = *rows[i], or the initial row of keys[i] (not reserved) where rows[i] is null:
// a warp a row (with founds: lane 0 writes founds[i], from set_first).
__global__ void copy_rows_or_initial_kernel(size_t n, float* const* rows, const uint64_t* keys,
                                            InitializerOptions init, uint32_t dim, float* values,
                                            bool* founds, const uint64_t* set, size_t slots) {
  const size_t warps = size_t{gridDim.x} * (blockDim.x / 32);
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t groups = (dim + 3) / 4;
  const bool vector = dim % 4 == 0 && reinterpret_cast<uintptr_t>(values) % 16 == 0;
  for (size_t i = (blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32; i < n; i += warps) {
    const float* row = rows[i];
    float* out = values + i * dim;
    if (row != nullptr) {
      if (founds != nullptr && lane == 0) founds[i] = true;
      copy_row_by_warp(row, dim, out, lane);
      continue;
    }
    const uint64_t key = keys[i];
    if (key >= kFirstReservedKey) {
      if (founds != nullptr && lane == 0) founds[i] = false;
      continue;
    }
    if (founds != nullptr && lane == 0) {  // found at a later copy of a new key
      const size_t at = set_find(set, slots, key);
      founds[i] = at < slots && set_first(set, slots)[at] != static_cast<uint32_t>(i);
    }
    for (uint32_t g = lane; g < groups; g += 32)
      initial_word_group(init, key, g, dim, vector, reinterpret_cast<uint32_t*>(out));
  }
}

// flags[i] = false where keys[i] is in the set.
__global__ void clear_flags_in_set_kernel(size_t n, const uint64_t* keys, const uint64_t* set,
                                          size_t slots, bool* flags) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    if (keys[i] < kFirstReservedKey && set_holds(set, slots, keys[i])) flags[i] = false;
}

// The index of `key` in sorted[0, u) (ascending), or u when absent.
__device__ size_t sorted_index(const uint64_t* sorted, size_t u, uint64_t key) {
  size_t lo = 0, hi = u;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (sorted[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < u && sorted[lo] == key ? lo : u;
}

// The index of `key` among stage_new_keys' u distinct keys (found in its set), or u when absent.
__device__ size_t staged_index(size_t u, const uint64_t* set, size_t slots, uint64_t key) {
  if (key >= kFirstReservedKey) return u;  // ~0 marks an empty slot
  const size_t pos = set_find(set, slots, key);
  return pos < slots ? set_index(set, slots)[pos] : u;
}

// first[k] = the first missed position of the k-th staged key (first starts at ~0).
__global__ void first_positions_kernel(size_t n, const uint64_t* keys, const bool* found, size_t u,
                                       const uint64_t* set, size_t slots, uint32_t* first) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    if (found[i]) continue;
    const size_t k = staged_index(u, set, slots, keys[i]);
    if (k < u) atomicMin(first + k, static_cast<uint32_t>(i));
  }
}

// found[i] = true at a missed position that is not its key's first.
__global__ void mark_repeats_kernel(size_t n, const uint64_t* keys, bool* found, size_t u,
                                    const uint64_t* set, size_t slots, const uint32_t* first) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    if (found[i]) continue;
    const size_t k = staged_index(u, set, slots, keys[i]);
    if (k < u && first[k] != static_cast<uint32_t>(i)) found[i] = true;
  }
}

// Flags status when the filter may hold one of the distinct missed keys below.
__global__ void stage_filter_kernel(const uint32_t* count, const uint64_t* unique,
                                    const unsigned long long* words, uint32_t log2_bits,
                                    unsigned long long* status) {
  const size_t u = *count;
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < u;
       k += size_t{gridDim.x} * blockDim.x)
    if (filter_may_hold(reinterpret_cast<const uint64_t*>(words), log2_bits, unique[k]))
      atomicOr(status + TierDevice::kStageWhy, TierDevice::kMaybeBelow);
}

// One thread: the status words (TierDevice::stage_new_keys).
__global__ void stage_status_kernel(const uint32_t* count, size_t cap, unsigned long long* status) {
  const size_t u = *count;
  unsigned long long why = status[TierDevice::kStageWhy];
  if (u > cap) why |= TierDevice::kOverCap;
  status[TierDevice::kStageDistinct] = u;
  status[TierDevice::kStageInsert] = why == 0 ? u : 0;
  status[TierDevice::kStageWhy] = why;
  status[TierDevice::kStageEvicted] = 0;
}

// dst[i] = value where found[i] is false.
__global__ void fill_missing_kernel(size_t n, const bool* found, uint64_t value, uint64_t* dst) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    if (!found[i]) dst[i] = value;
}

// Element j of `words` words: out[j] = src[positions[j]] (gather) or dst[positions[j]] = in[j]
// (scatter), one thread per word.
__global__ void gather_words_kernel(size_t m, const uint32_t* positions, const uint32_t* src,
                                    uint32_t words, uint32_t* out) {
  const size_t total = m * words;
  for (size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x; t < total;
       t += size_t{gridDim.x} * blockDim.x) {
    const size_t j = t / words, w = t % words;
    out[t] = src[size_t{positions[j]} * words + w];
  }
}

__global__ void scatter_words_kernel(size_t m, const uint32_t* positions, const uint32_t* in,
                                     uint32_t words, uint32_t* dst) {
  const size_t total = m * words;
  for (size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x; t < total;
       t += size_t{gridDim.x} * blockDim.x) {
    const size_t j = t / words, w = t % words;
    dst[size_t{positions[j]} * words + w] = in[t];
  }
}

__global__ void scatter_bytes_kernel(size_t m, const uint32_t* positions, const uint8_t* in,
                                     uint8_t* dst) {
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < m;
       j += size_t{gridDim.x} * blockDim.x)
    dst[positions[j]] = in[j];
}

// flags[i] = false where keys[i] is in sorted[0, m).
__global__ void clear_flags_of_kernel(size_t n, const uint64_t* keys, const uint64_t* sorted,
                                      size_t m, bool* flags) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    if (sorted_index(sorted, m, keys[i]) < m) flags[i] = false;
}

// For each i < n whose key is want_sorted[j]: at[order[j]] = max(at[order[j]], i + 1).
__global__ void last_positions_kernel(size_t n, const uint64_t* keys, const uint64_t* want_sorted,
                                      const uint32_t* order, size_t m, uint32_t* at) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t j = sorted_index(want_sorted, m, keys[i]);
    if (j < m) atomicMax(at + order[j], static_cast<uint32_t>(i + 1));
  }
}

// *count += the i < n with found[i] false.
__global__ void count_missing_kernel(size_t n, const bool* found, unsigned long long* count) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    mine += found[i] ? 0 : 1;
  if (mine != 0) atomicAdd(count, mine);
}

// Row index[j] of `rows` = the initial row of keys[j]: a thread per word.
__global__ void initial_rows_kernel(size_t m, const uint32_t* index, const uint64_t* keys,
                                    InitializerOptions init, uint32_t dim, uint32_t* rows) {
  const size_t total = m * dim;
  for (size_t t = blockIdx.x * size_t{blockDim.x} + threadIdx.x; t < total;
       t += size_t{gridDim.x} * blockDim.x) {
    const size_t j = t / dim;
    const uint32_t w = static_cast<uint32_t>(t % dim);
    rows[size_t{index[j]} * dim + w] = initial_word(init, keys[j], w);
  }
}

// Pinned host memory that grows; freed with cudaFreeHost.
struct Pinned {
  void* data = nullptr;
  size_t bytes = 0;
  // True when it allocated.
  bool reserve(size_t want) {
    if (want <= bytes) return false;
    if (data != nullptr) cudaFreeHost(data);
    data = nullptr;
    // Doubling: a size that creeps up call by call reallocates a few times, not at every call.
    const size_t size = std::max({want, bytes * 2, size_t{8} << 20});
    bytes = 0;
    check(cudaHostAlloc(&data, size, cudaHostAllocDefault), "CachedTable: cudaHostAlloc (staging)");
    bytes = size;
    return true;
  }
  ~Pinned() {
    if (data != nullptr) cudaFreeHost(data);
  }
};

// One stream's pinned staging: uploads take consecutive regions; the arena starts over once the
// copies issued from it are done (an event after the last one, on the same stream).
struct StreamStaging {
  Pinned up, down;
  size_t used = 0;
  cudaEvent_t last_copy = nullptr;
  bool pending = false;
  ~StreamStaging() {
    if (last_copy != nullptr) cudaEventDestroy(last_copy);
  }
};

// Pinned staging reserved a key each way: list_misses reads back 25 bytes a missed position; a
// call uploads keys, scores and row positions (8 + 8 + 4), with room to spare.
constexpr size_t kStagedBytesPerKey = 32;

class CudaTierDevice final : public TierDevice {
 public:
  explicit CudaTierDevice(int device) : device_(device) {
    core::cuda::DeviceGuard guard(device_);
    // The highest priority: a prefetch's short kernels (each waited for on the host) run as soon
    // as a block frees up, instead of queueing behind a training step's long kernels.
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "CachedTable: stream priorities");
    check(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, greatest),
          "CachedTable: stream");
    for (auto& e : marks_)
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "CachedTable: event");
    check(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming), "CachedTable: event");
  }
  ~CudaTierDevice() override {
    core::cuda::DeviceGuard guard(device_);
    cudaStreamSynchronize(side_);
    for (auto& [stream, staging] : staging_)
      if (staging.last_copy != nullptr) cudaEventSynchronize(staging.last_copy);
    for (void* p : buffers_)
      if (p != nullptr) cudaFree(p);
    for (auto& e : marks_) cudaEventDestroy(e);
    cudaEventDestroy(order_);
    if (count_device_ != nullptr) cudaFree(count_device_);
    if (filter_ != nullptr) cudaFree(filter_);
    if (posted_ != nullptr) cudaFreeHost(posted_);
    if (posted_copy_ != nullptr) cudaEventDestroy(posted_copy_);
    cudaStreamDestroy(side_);
  }

  void* scratch(Scratch slot, size_t bytes, StreamHandle stream) override {
    const size_t i = static_cast<size_t>(slot);
    if (sizes_[i] >= bytes && buffers_[i] != nullptr) return buffers_[i];
    core::cuda::DeviceGuard guard(device_);
    core::cuda::sync(as_stream(stream), "CachedTable: scratch growth");
    const size_t size = std::max({bytes, sizes_[i] * 2, size_t{4096}});
    if (buffers_[i] != nullptr) check(cudaFree(buffers_[i]), "CachedTable: cudaFree (scratch)");
    buffers_[i] = nullptr;
    sizes_[i] = 0;
    check(cudaMalloc(&buffers_[i], size), "CachedTable: cudaMalloc (scratch)");
    sizes_[i] = size;
    ++growths_;
    return buffers_[i];
  }

  void reserve(size_t keys, StreamHandle stream) override {
    if (keys == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const size_t n = keys;
    const auto buffer = [&](Scratch slot, size_t bytes) { scratch(slot, bytes, stream); };
    // list_misses (at most n missed positions) and its CUB passes.
    for (const Scratch s4 :
         {Scratch::kMissPositions, Scratch::kMissOrder, Scratch::kSortedOrder, Scratch::kRuns,
          Scratch::kMissIndex, Scratch::kMissFirst, Scratch::kMissLast})
      buffer(s4, n * 4);
    for (const Scratch s8 : {Scratch::kMissKeys, Scratch::kSortedKeys, Scratch::kMissUnique})
      buffer(s8, n * 8);
    buffer(Scratch::kMissCount, 8);
    buffer(Scratch::kStageCount, 8);
    buffer(Scratch::kMissMaybe, n);
    buffer(Scratch::kSelectTemp, miss_temp_bytes(n, as_stream(stream)));
    // Pinned staging: the keys, scores and positions a call copies each way (list_misses reads
    // back 25 bytes a missed position), for the prefetch stream, the default stream and the
    // first other one.
    const size_t up = n * kStagedBytesPerKey, down = n * kStagedBytesPerKey;
    for (const StreamHandle st : {StreamHandle{side_}, StreamHandle{nullptr}}) {
      StreamStaging& s = staging(st);
      growths_ += s.up.reserve(up) + s.down.reserve(down);
    }
    growths_ += spare_.up.reserve(up) + spare_.down.reserve(down);
  }

  uint64_t growths() const override { return growths_; }

  float* host_rows(HostRows which, size_t floats) override {
    Pinned& p = rows_[static_cast<size_t>(which)];
    if (p.bytes < floats * sizeof(float)) {
      core::cuda::DeviceGuard guard(device_);
      check(cudaDeviceSynchronize(), "CachedTable: host rows growth");  // no copy uses it
      growths_ += p.reserve(std::max(floats * sizeof(float), p.bytes * 2));
    }
    return static_cast<float*>(p.data);
  }

  void upload(void* dst, const void* host, size_t bytes, StreamHandle stream) override {
    if (bytes == 0) return;
    core::cuda::DeviceGuard guard(device_);
    if (in_host_rows(host, bytes)) {  // pinned already: straight
      check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
            "CachedTable: upload");
      return;
    }
    StreamStaging& s = staging(stream);
    const size_t need = (bytes + 255) / 256 * 256;
    if (s.used + need > s.up.bytes) {
      if (s.pending) check(cudaEventSynchronize(s.last_copy), "CachedTable: staging");
      s.pending = false;
      growths_ += s.up.reserve(need);  // grows (doubling) only for a copy larger than the arena
      s.used = 0;
    }
    char* region = static_cast<char*>(s.up.data) + s.used;
    std::memcpy(region, host, bytes);
    check(cudaMemcpyAsync(dst, region, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
          "CachedTable: upload");
    check(cudaEventRecord(s.last_copy, as_stream(stream)), "CachedTable: staging event");
    s.pending = true;
    s.used += need;
  }

  void download(void* host, const void* src, size_t bytes, StreamHandle stream) override {
    if (bytes == 0) return;
    core::cuda::DeviceGuard guard(device_);
    if (in_host_rows(host, bytes)) {  // pinned already: straight
      check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)),
            "CachedTable: download");
      core::cuda::sync(as_stream(stream), "CachedTable: download");
      return;
    }
    StreamStaging& s = staging(stream);
    growths_ += s.down.reserve(bytes);
    check(cudaMemcpyAsync(s.down.data, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)),
          "CachedTable: download");
    core::cuda::sync(as_stream(stream), "CachedTable: download");
    std::memcpy(host, s.down.data, bytes);
  }

  void gather_host_rows(size_t m, const uint32_t* index, const float* host, uint32_t dim,
                        float* dst, StreamHandle stream_handle) override {
    if (m == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    uint32_t top = 0;
    for (size_t p = 0; p < m; ++p) top = std::max(top, index[p]);
    if (!in_host_rows(host, (size_t{top} + 1) * dim * sizeof(float))) {
      // Not pinned: gathered on the host, then one copy.
      std::vector<float> rows(m * dim);
      for (size_t p = 0; p < m; ++p)
        std::memcpy(rows.data() + p * dim, host + size_t{index[p]} * dim, dim * sizeof(float));
      upload(dst, rows.data(), rows.size() * sizeof(float), stream_handle);
      return;
    }
    DeviceArray<uint32_t> dindex(m, stream);
    upload(dindex.data(), index, m * sizeof(uint32_t), stream_handle);
    gather_host_rows_kernel<<<blocks_for(m * dim), kBlock, 0, stream>>>(
        m, dindex.data(), reinterpret_cast<const uint32_t*>(host), dim,
        reinterpret_cast<uint32_t*>(dst));
    check_launch("CachedTable: gather host rows");
  }

  void copy(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    if (bytes == 0 || dst == src) return;
    core::cuda::DeviceGuard guard(device_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)),
          "CachedTable: copy");
  }

  void fill(size_t n, uint64_t value, uint64_t* dst, StreamHandle stream) override {
    if (n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    fill_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(n, value, dst);
    check_launch("CachedTable: fill");
  }

  void list_misses(size_t n, const uint64_t* keys, const bool* found, MissList& out,
                   StreamHandle stream_handle) override {
    out = MissList{};
    if (n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    const auto buffer = [&](Scratch slot, size_t bytes) {
      return scratch(slot, bytes, stream_handle);
    };
    auto* picked = static_cast<uint32_t*>(buffer(Scratch::kMissPositions, n * 4));
    auto* missed = static_cast<uint64_t*>(buffer(Scratch::kMissKeys, n * 8));
    auto* count = static_cast<uint32_t*>(buffer(Scratch::kMissCount, 8));
    auto* order = static_cast<uint32_t*>(buffer(Scratch::kMissOrder, n * 4));
    const thrust::counting_iterator<uint32_t> all(0);
    size_t temp_bytes = 0;
    check(cub::DeviceSelect::If(nullptr, temp_bytes, all, picked, count, static_cast<int>(n),
                                NotFound{found}, stream),
          "CachedTable: DeviceSelect::If (size)");
    void* temp = buffer(Scratch::kSelectTemp, temp_bytes);
    check(cub::DeviceSelect::If(temp, temp_bytes, all, picked, count, static_cast<int>(n),
                                NotFound{found}, stream),
          "CachedTable: DeviceSelect::If");
    // Issued before the count comes back: the missed keys, and their order to sort.
    gather_keys_kernel<<<blocks_for(n), kBlock, 0, stream>>>(count, picked, keys, missed);
    iota_kernel<<<blocks_for(n), kBlock, 0, stream>>>(count, order);
    check_launch("CachedTable: gather keys");
    uint32_t m = 0;
    download(&m, count, sizeof(m), stream_handle);
    if (m == 0) return;
    // The distinct missed keys: sorted with their order (stable), runs of equal keys numbered.
    auto* sorted = static_cast<uint64_t*>(buffer(Scratch::kSortedKeys, size_t{m} * 8));
    auto* sorted_order = static_cast<uint32_t*>(buffer(Scratch::kSortedOrder, size_t{m} * 4));
    auto* runs = static_cast<uint32_t*>(buffer(Scratch::kRuns, size_t{m} * 4));
    auto* index = static_cast<uint32_t*>(buffer(Scratch::kMissIndex, size_t{m} * 4));
    auto* unique = static_cast<uint64_t*>(buffer(Scratch::kMissUnique, size_t{m} * 8));
    auto* first = static_cast<uint32_t*>(buffer(Scratch::kMissFirst, size_t{m} * 4));
    auto* last = static_cast<uint32_t*>(buffer(Scratch::kMissLast, size_t{m} * 4));
    temp_bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, missed, sorted, order, sorted_order,
                                          static_cast<int>(m), 0, 64, stream),
          "CachedTable: DeviceRadixSort::SortPairs (size)");
    size_t scan_bytes = 0;
    check(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, runs, index, static_cast<int>(m),
                                        stream),
          "CachedTable: DeviceScan::InclusiveSum (size)");
    temp = buffer(Scratch::kSelectTemp, std::max(temp_bytes, scan_bytes));
    check(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, missed, sorted, order, sorted_order,
                                          static_cast<int>(m), 0, 64, stream),
          "CachedTable: DeviceRadixSort::SortPairs");
    run_heads_kernel<<<blocks_for(m), kBlock, 0, stream>>>(m, sorted, runs);
    check_launch("CachedTable: run heads");
    // Heads in `runs`, summed into `index` (as scratch), then distinct_kernel writes `index`
    // from `runs` = that sum: copy it back first.
    check(cub::DeviceScan::InclusiveSum(temp, scan_bytes, runs, index, static_cast<int>(m), stream),
          "CachedTable: DeviceScan::InclusiveSum");
    check(cudaMemcpyAsync(runs, index, size_t{m} * 4, cudaMemcpyDeviceToDevice, stream),
          "CachedTable: runs");
    distinct_kernel<<<blocks_for(m), kBlock, 0, stream>>>(m, sorted, sorted_order, runs, picked,
                                                          index, unique, first, last, count + 1);
    check_launch("CachedTable: distinct misses");
    uint8_t* maybe = nullptr;
    if (filter_ != nullptr) {
      maybe = static_cast<uint8_t*>(buffer(Scratch::kMissMaybe, m));
      filter_maybe_kernel<<<blocks_for(m), kBlock, 0, stream>>>(count + 1, unique, filter_,
                                                                filter_log2_, maybe);
      check_launch("CachedTable: filter");
    }
    out.maybe_below.assign(m, 1);
    out.positions.resize(m);
    out.index.resize(m);
    out.unique.resize(m);
    out.first.resize(m);
    out.last.resize(m);
    uint32_t distinct = 0;
    download_parts({{out.positions.data(), picked, size_t{m} * 4},
                    {out.index.data(), index, size_t{m} * 4},
                    {out.unique.data(), unique, size_t{m} * 8},
                    {out.first.data(), first, size_t{m} * 4},
                    {out.last.data(), last, size_t{m} * 4},
                    {&distinct, count + 1, 4},
                    {out.maybe_below.data(), maybe, maybe != nullptr ? size_t{m} : 0}},
                   stream_handle);
    out.maybe_below.resize(distinct);
    out.unique.resize(distinct);
    out.first.resize(distinct);
    out.last.resize(distinct);
  }

  void filter_reset(uint32_t log2_bits, StreamHandle stream) override {
    core::cuda::DeviceGuard guard(device_);
    const size_t words = std::max<size_t>((size_t{1} << log2_bits) / 64, 1);
    if (filter_ != nullptr && filter_log2_ != log2_bits) {
      core::cuda::sync(as_stream(stream), "CachedTable: filter");
      check(cudaFree(filter_), "CachedTable: cudaFree (filter)");
      filter_ = nullptr;
    }
    if (filter_ == nullptr)
      check(cudaMalloc(&filter_, words * sizeof(unsigned long long)),
            "CachedTable: cudaMalloc (filter)");
    filter_log2_ = log2_bits;
    check(cudaMemsetAsync(filter_, 0, words * sizeof(unsigned long long), as_stream(stream)),
          "CachedTable: filter");
  }

  void filter_add(size_t n, const uint64_t* keys, StreamHandle stream) override {
    if (filter_ == nullptr || n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    filter_add_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(n, keys, filter_,
                                                                       filter_log2_);
    check_launch("CachedTable: filter add");
  }

  void filter_add_host(size_t n, const uint64_t* keys, StreamHandle stream) override {
    if (filter_ == nullptr || n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    DeviceArray<uint64_t> dkeys(n, as_stream(stream));
    upload(dkeys.data(), keys, n * sizeof(uint64_t), stream);
    filter_add(n, dkeys.data(), stream);
  }

  void download_parts(std::initializer_list<Part> parts, StreamHandle stream_handle) override {
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    StreamStaging& s = staging(stream_handle);
    size_t staged = 0;
    for (const Part& p : parts)
      if (p.bytes > 0 && !in_host_rows(p.host, p.bytes)) staged += (p.bytes + 255) / 256 * 256;
    growths_ += s.down.reserve(staged);
    char* base = static_cast<char*>(s.down.data);
    size_t offset = 0;
    bool any = false;
    for (const Part& p : parts) {
      if (p.bytes == 0) continue;
      any = true;
      void* to = p.host;
      if (!in_host_rows(p.host, p.bytes)) {
        to = base + offset;
        offset += (p.bytes + 255) / 256 * 256;
      }
      check(cudaMemcpyAsync(to, p.src, p.bytes, cudaMemcpyDeviceToHost, stream),
            "CachedTable: download");
    }
    if (!any) return;
    core::cuda::sync(stream, "CachedTable: download");
    offset = 0;
    for (const Part& p : parts) {
      if (p.bytes == 0 || in_host_rows(p.host, p.bytes)) continue;
      std::memcpy(p.host, base + offset, p.bytes);
      offset += (p.bytes + 255) / 256 * 256;
    }
  }

  void scatter_to(size_t m, const uint32_t* positions, const void* host_src, size_t elem_bytes,
                  void* dst, StreamHandle stream_handle) override {
    if (m == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    DeviceArray<uint8_t> in(m * elem_bytes, stream);
    upload(in.data(), host_src, m * elem_bytes, stream_handle);
    if (elem_bytes == 1) {
      scatter_bytes_kernel<<<blocks_for(m), kBlock, 0, stream>>>(m, positions, in.data(),
                                                                 static_cast<uint8_t*>(dst));
    } else {
      const uint32_t words = static_cast<uint32_t>(elem_bytes / 4);
      scatter_words_kernel<<<blocks_for(m * words), kBlock, 0, stream>>>(
          m, positions, reinterpret_cast<const uint32_t*>(in.data()), words,
          static_cast<uint32_t*>(dst));
    }
    check_launch("CachedTable: scatter");
  }

  void initial_rows_from(size_t first, size_t m, const uint64_t* keys,
                         const InitializerOptions& init, uint32_t dim, float* rows,
                         StreamHandle stream) override {
    if (first >= m) return;
    core::cuda::DeviceGuard guard(device_);
    initial_rows_from_kernel<<<blocks_for_rows(m - first), kBlock, 0, as_stream(stream)>>>(
        first, m, keys, init, dim, reinterpret_cast<uint32_t*>(rows));
    check_launch("CachedTable: initial rows");
  }

  void copy_rows_to(size_t m, const uint32_t* positions, float* const* rows, uint32_t dim,
                    float* values, StreamHandle stream) override {
    if (m == 0) return;
    core::cuda::DeviceGuard guard(device_);
    copy_rows_kernel<<<blocks_for(m * 32), kBlock, 0, as_stream(stream)>>>(m, positions, rows, dim,
                                                                           values);
    check_launch("CachedTable: copy rows to positions");
  }

  void gather(size_t m, const uint32_t* positions, const void* src, size_t elem_bytes,
              void* host_out, StreamHandle stream_handle) override {
    if (m == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    DeviceArray<uint32_t> dpos(m, stream);
    upload(dpos.data(), positions, m * sizeof(uint32_t), stream_handle);
    const uint32_t words = static_cast<uint32_t>(elem_bytes / 4);
    DeviceArray<uint32_t> out(m * words, stream);
    gather_words_kernel<<<blocks_for(m * words), kBlock, 0, stream>>>(
        m, dpos.data(), static_cast<const uint32_t*>(src), words, out.data());
    check_launch("CachedTable: gather");
    download(host_out, out.data(), m * elem_bytes, stream_handle);
  }

  void scatter(size_t m, const uint32_t* positions, const void* host_src, size_t elem_bytes,
               void* dst, StreamHandle stream_handle) override {
    if (m == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    DeviceArray<uint32_t> dpos(m, stream);
    upload(dpos.data(), positions, m * sizeof(uint32_t), stream_handle);
    DeviceArray<uint8_t> in(m * elem_bytes, stream);
    upload(in.data(), host_src, m * elem_bytes, stream_handle);
    if (elem_bytes == 1) {
      scatter_bytes_kernel<<<blocks_for(m), kBlock, 0, stream>>>(m, dpos.data(), in.data(),
                                                                 static_cast<uint8_t*>(dst));
    } else {
      const uint32_t words = static_cast<uint32_t>(elem_bytes / 4);
      scatter_words_kernel<<<blocks_for(m * words), kBlock, 0, stream>>>(
          m, dpos.data(), reinterpret_cast<const uint32_t*>(in.data()), words,
          static_cast<uint32_t*>(dst));
    }
    check_launch("CachedTable: scatter");
  }

  void last_positions(size_t n, const uint64_t* keys, size_t m, const uint64_t* want, uint32_t* at,
                      StreamHandle stream_handle) override {
    if (m == 0) return;
    std::fill(at, at + m, ~0u);
    if (n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    std::vector<uint32_t> order(m);
    for (size_t j = 0; j < m; ++j) order[j] = static_cast<uint32_t>(j);
    std::sort(order.begin(), order.end(),
              [&](uint32_t x, uint32_t y) { return want[x] < want[y]; });
    std::vector<uint64_t> sorted(m);
    for (size_t j = 0; j < m; ++j) sorted[j] = want[order[j]];
    DeviceArray<uint64_t> dsorted(m, stream);
    DeviceArray<uint32_t> dorder(m, stream);
    DeviceArray<uint32_t> dat(m, stream);
    upload(dsorted.data(), sorted.data(), m * sizeof(uint64_t), stream_handle);
    upload(dorder.data(), order.data(), m * sizeof(uint32_t), stream_handle);
    check(cudaMemsetAsync(dat.data(), 0, m * sizeof(uint32_t), stream), "CachedTable: memset");
    last_positions_kernel<<<blocks_for(n), kBlock, 0, stream>>>(n, keys, dsorted.data(),
                                                                dorder.data(), m, dat.data());
    check_launch("CachedTable: last positions");
    download(at, dat.data(), m * sizeof(uint32_t), stream_handle);
    for (size_t j = 0; j < m; ++j) at[j] = at[j] == 0 ? ~0u : at[j] - 1;
  }

  void clear_flags_of(size_t n, const uint64_t* keys, const uint64_t* sorted, size_t m, bool* flags,
                      StreamHandle stream) override {
    if (n == 0 || m == 0) return;
    core::cuda::DeviceGuard guard(device_);
    clear_flags_of_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(n, keys, sorted, m,
                                                                           flags);
    check_launch("CachedTable: clear flags");
  }

  void initial_rows(size_t m, const uint32_t* index, const uint64_t* keys,
                    const InitializerOptions& init, uint32_t dim, float* rows,
                    StreamHandle stream_handle) override {
    if (m == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    DeviceArray<uint32_t> dindex(m, stream);
    DeviceArray<uint64_t> dkeys(m, stream);
    upload(dindex.data(), index, m * sizeof(uint32_t), stream_handle);
    upload(dkeys.data(), keys, m * sizeof(uint64_t), stream_handle);
    initial_rows_kernel<<<blocks_for(m * dim), kBlock, 0, stream>>>(
        m, dindex.data(), dkeys.data(), init, dim, reinterpret_cast<uint32_t*>(rows));
    check_launch("CachedTable: initial rows");
  }

  void copy_rows_out(size_t n, float* const* rows, uint32_t dim, float* values,
                     StreamHandle stream) override {
    if (n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    copy_rows_kernel<<<blocks_for(n * 32), kBlock, 0, as_stream(stream)>>>(n, nullptr, rows, dim,
                                                                           values);
    check_launch("CachedTable: copy rows out");
  }

  void copy_rows_or_initial(size_t n, float* const* rows, const uint64_t* keys,
                            const InitializerOptions& init, uint32_t dim, float* values,
                            bool* founds, const uint64_t* set, size_t set_slots,
                            StreamHandle stream) override {
    if (n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    copy_rows_or_initial_kernel<<<blocks_for(n * 32), kBlock, 0, as_stream(stream)>>>(
        n, rows, keys, init, dim, values, founds, set, set_slots);
    check_launch("CachedTable: rows out or initial");
  }

  void count_missing(size_t n, const bool* found, StreamHandle stream) override {
    core::cuda::DeviceGuard guard(device_);
    if (count_device_ == nullptr) {
      check(cudaMalloc(&count_device_, sizeof(unsigned long long)), "CachedTable: count");
      check(cudaMemset(count_device_, 0, sizeof(unsigned long long)), "CachedTable: count");
    }
    if (n == 0) return;
    count_missing_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(n, found, count_device_);
    check_launch("CachedTable: count missing");
  }

  uint64_t missing_total() override {
    if (count_device_ == nullptr) return 0;
    core::cuda::DeviceGuard guard(device_);
    check(cudaDeviceSynchronize(), "CachedTable: count");  // whatever stream counted
    unsigned long long total = 0;
    check(cudaMemcpy(&total, count_device_, sizeof(total), cudaMemcpyDeviceToHost),
          "CachedTable: count");
    return total;
  }

  void clear_flags_of_staged(size_t n, const uint64_t* keys, const uint64_t*, size_t u,
                             const uint64_t* set, size_t set_slots, bool* flags,
                             StreamHandle stream) override {
    if (n == 0 || u == 0) return;
    core::cuda::DeviceGuard guard(device_);
    clear_flags_in_set_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(n, keys, set,
                                                                               set_slots, flags);
    check_launch("CachedTable: clear flags (set)");
  }

  void stage_new_keys(size_t n, const uint64_t* keys, const bool* found, size_t cap,
                      uint64_t* unique, uint64_t* status, uint64_t* set, size_t set_slots,
                      StreamHandle stream_handle) override {
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    auto* st = reinterpret_cast<unsigned long long*>(status);
    check(cudaMemsetAsync(st, 0, kStageWords * sizeof(uint64_t), stream), "CachedTable: status");
    if (n == 0) return;
    auto* count = static_cast<uint32_t*>(scratch(Scratch::kStageCount, 8, stream_handle));
    // The keys and their first positions (set_first).
    check(cudaMemsetAsync(set, 0xFF, set_slots * 12, stream), "CachedTable: staged set");
    check(cudaMemsetAsync(count, 0, 4, stream), "CachedTable: staged count");
    stage_hash_kernel<<<blocks_for(n), kBlock, 0, stream>>>(
        n, keys, found, reinterpret_cast<unsigned long long*>(set), set_slots, unique, count, st);
    check_launch("CachedTable: stage hash");
    if (filter_ != nullptr) {
      stage_filter_kernel<<<blocks_for(n), kBlock, 0, stream>>>(count, unique, filter_,
                                                                filter_log2_, st);
      check_launch("CachedTable: stage filter");
    }
    stage_status_kernel<<<1, 1, 0, stream>>>(count, cap, st);
    check_launch("CachedTable: stage status");
  }

  void mark_repeats(size_t n, const uint64_t* keys, bool* found, const uint64_t*, size_t u,
                    uint32_t* first, const uint64_t* set, size_t set_slots,
                    StreamHandle stream_handle) override {
    if (n == 0 || u == 0) return;
    core::cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = as_stream(stream_handle);
    check(cudaMemsetAsync(first, 0xFF, u * sizeof(uint32_t), stream), "CachedTable: first");
    first_positions_kernel<<<blocks_for(n), kBlock, 0, stream>>>(n, keys, found, u, set, set_slots,
                                                                 first);
    mark_repeats_kernel<<<blocks_for(n), kBlock, 0, stream>>>(n, keys, found, u, set, set_slots,
                                                              first);
    check_launch("CachedTable: mark repeats");
  }

  void fill_missing(size_t n, const bool* found, uint64_t value, uint64_t* dst,
                    StreamHandle stream) override {
    if (n == 0) return;
    core::cuda::DeviceGuard guard(device_);
    fill_missing_kernel<<<blocks_for(n), kBlock, 0, as_stream(stream)>>>(n, found, value, dst);
    check_launch("CachedTable: fill missing");
  }

  void post_words(const uint64_t* src, size_t words, StreamHandle stream) override {
    core::cuda::DeviceGuard guard(device_);
    if (posted_ == nullptr) {
      check(cudaHostAlloc(reinterpret_cast<void**>(&posted_), kStageWords * sizeof(uint64_t),
                          cudaHostAllocDefault),
            "CachedTable: cudaHostAlloc (status)");
      check(cudaEventCreateWithFlags(&posted_copy_, cudaEventDisableTiming), "CachedTable: event");
    }
    check(cudaMemcpyAsync(posted_, src, std::min<size_t>(words, kStageWords) * sizeof(uint64_t),
                          cudaMemcpyDeviceToHost, as_stream(stream)),
          "CachedTable: status copy");
    check(cudaEventRecord(posted_copy_, as_stream(stream)), "CachedTable: status event");
  }

  void take_words(uint64_t* host, size_t words) override {
    if (posted_ == nullptr) return;
    core::cuda::DeviceGuard guard(device_);
    check(cudaEventSynchronize(posted_copy_), "CachedTable: status wait");
    std::memcpy(host, posted_, std::min<size_t>(words, kStageWords) * sizeof(uint64_t));
  }

  StreamHandle side_stream() override { return side_; }

  void record(Mark mark, StreamHandle stream) override {
    core::cuda::DeviceGuard guard(device_);
    const size_t i = static_cast<size_t>(mark);
    check(cudaEventRecord(marks_[i], as_stream(stream)), "CachedTable: record");
    recorded_[i] = true;
  }

  void wait(StreamHandle stream, Mark mark) override {
    const size_t i = static_cast<size_t>(mark);
    if (!recorded_[i]) return;
    core::cuda::DeviceGuard guard(device_);
    check(cudaStreamWaitEvent(as_stream(stream), marks_[i], 0), "CachedTable: wait");
  }

  void order_after(StreamHandle waiter, StreamHandle stream) override {
    if (waiter == stream) return;
    core::cuda::DeviceGuard guard(device_);
    check(cudaEventRecord(order_, as_stream(stream)), "CachedTable: order");
    check(cudaStreamWaitEvent(as_stream(waiter), order_, 0), "CachedTable: order");
  }

  void synchronize(StreamHandle stream) override {
    core::cuda::DeviceGuard guard(device_);
    core::cuda::sync(as_stream(stream), "CachedTable: synchronize");
  }

 private:
  // True when [p, p + bytes) lies in one of the pinned host row buffers.
  bool in_host_rows(const void* p, size_t bytes) const {
    const auto* c = static_cast<const char*>(p);
    for (const Pinned& r : rows_) {
      const auto* base = static_cast<const char*>(r.data);
      if (base != nullptr && c >= base && c + bytes <= base + r.bytes) return true;
    }
    return false;
  }

  StreamStaging& staging(StreamHandle stream) {
    StreamStaging& s = staging_[stream];
    if (s.last_copy == nullptr) {
      check(cudaEventCreateWithFlags(&s.last_copy, cudaEventDisableTiming), "CachedTable: event");
      // The first stream but the prefetch's and the default one takes the buffers reserved for
      // it.
      if (stream != side_ && stream != nullptr && spare_.up.data != nullptr) {
        std::swap(s.up.data, spare_.up.data);
        std::swap(s.up.bytes, spare_.up.bytes);
        std::swap(s.down.data, spare_.down.data);
        std::swap(s.down.bytes, spare_.down.bytes);
      }
    }
    return s;
  }

  // Scratch bytes of list_misses' CUB passes over n keys.
  static size_t miss_temp_bytes(size_t n, cudaStream_t stream) {
    size_t select = 0, sort = 0, scan = 0;
    const thrust::counting_iterator<uint32_t> all(0);
    const int items = static_cast<int>(n);
    check(cub::DeviceSelect::If(nullptr, select, all, static_cast<uint32_t*>(nullptr),
                                static_cast<uint32_t*>(nullptr), items, NotFound{nullptr}, stream),
          "CachedTable: DeviceSelect::If (size)");
    check(cub::DeviceRadixSort::SortPairs(nullptr, sort, static_cast<const uint64_t*>(nullptr),
                                          static_cast<uint64_t*>(nullptr),
                                          static_cast<const uint32_t*>(nullptr),
                                          static_cast<uint32_t*>(nullptr), items, 0, 64, stream),
          "CachedTable: DeviceRadixSort::SortPairs (size)");
    check(cub::DeviceScan::InclusiveSum(nullptr, scan, static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), items, stream),
          "CachedTable: DeviceScan::InclusiveSum (size)");
    return std::max({select, sort, scan});
  }

  int device_;
  cudaStream_t side_ = nullptr;
  std::array<cudaEvent_t, static_cast<size_t>(Mark::kCount)> marks_{};
  std::array<bool, static_cast<size_t>(Mark::kCount)> recorded_{};
  cudaEvent_t order_ = nullptr;
  unsigned long long* count_device_ = nullptr;
  uint64_t* posted_ = nullptr;  // post_words' pinned landing place
  cudaEvent_t posted_copy_ = nullptr;
  unsigned long long* filter_ = nullptr;  // the filter of keys that may be below (or none)
  uint32_t filter_log2_ = 0;
  std::array<void*, static_cast<size_t>(Scratch::kCount)> buffers_{};
  std::array<size_t, static_cast<size_t>(Scratch::kCount)> sizes_{};
  std::map<StreamHandle, StreamStaging> staging_;
  std::array<Pinned, static_cast<size_t>(HostRows::kCount)> rows_;
  StreamStaging spare_;  // reserved staging for the first stream other than the prefetch's
  uint64_t growths_ = 0;
};

}  // namespace

std::unique_ptr<TierDevice> make_cuda_tier_device(int device) {
  return std::make_unique<CudaTierDevice>(device);
}

}  // namespace dynemb::storage::detail

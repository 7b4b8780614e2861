// Device-side building blocks of the CUDA table: a tile of 4 or 8 threads works on one key,
// scans its bucket's 8-bit digests 16 or 32 at a time per thread, confirms candidates by key,
// locks buckets for writers and copies rows (eviction victims: victim.cuh).
#pragma once

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include <cstdint>

#include "cuda/device_layout.hpp"
#include "dynemb/core/cuda/prefetch.cuh"
#include "dynemb/core/hash.hpp"
#include "dynemb/core/initializer.hpp"
#include "dynemb/core/key.hpp"
#include "dynemb/core/score.hpp"

namespace dynemb::table::cuda {

namespace cg = cooperative_groups;

// Threads that cooperate on one key: kT of them (4 or 8) load a 128-slot bucket's digests in one
// coalesced 128-byte load. Row-copying finds, the rehash and the touch pass use tiles of
// kTileSize; the write kernels, contains and find_pointers pick 4 or 8 per launch
// (docs/cuda_table.md, "Tiles of 4 threads").
template <uint32_t kT>
using TileOf = cg::thread_block_tile<kT>;
inline constexpr uint32_t kTileSize = 8;
using Tile = TileOf<kTileSize>;
inline constexpr uint32_t kBlockThreads = 256;
inline constexpr uint32_t kTilesPerBlock = kBlockThreads / kTileSize;

// Blocks of kBlockThreads for one tile (of kBlockThreads / tiles_per_block threads) per item, at
// most `max_blocks` (the kernels stride over the rest); at least one.
inline unsigned blocks_for_tiles(uint64_t items, uint64_t max_blocks,
                                 uint32_t tiles_per_block = kTilesPerBlock) {
  const uint64_t blocks = (items + tiles_per_block - 1) / tiles_per_block;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks < max_blocks ? blocks : max_blocks));
}

// Blocks of 256 threads for one thread per item, at most `max_blocks`; at least one.
inline unsigned blocks_for_threads(uint64_t items, uint64_t max_blocks) {
  const uint64_t blocks = (items + 255) / 256;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks < max_blocks ? blocks : max_blocks));
}

// Whether float4 access at `p` is aligned (null counts as aligned: it is never read).
inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Nanoseconds of the device's global timer.
__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Loads that writers use: they bypass L1 so a value written by another SM under a lock is seen.
template <bool kCoherent, class T>
__device__ __forceinline__ T load(const T* p) {
  if constexpr (kCoherent) {
    return __ldcg(p);
  } else {
    return *p;
  }
}

// uint4s of digests a thread of a kT-thread tile loads per round, and the slots of a round:
// 128 for tiles of up to 8 threads.
template <uint32_t kT>
inline constexpr uint32_t kDigestVecs = kT >= 8 ? 1 : 8 / kT;
template <uint32_t kT>
inline constexpr uint32_t kRoundSlots = 16 * kDigestVecs<kT>* kT;

// Asks L2 for a stored row in HBM while its key is still being confirmed, so the row's copy
// reads L2 (one bulk prefetch of the whole row on sm_90, else a prefetch per 128-byte line). A
// row in host memory is not asked for: a candidate that is not the key would spend PCIe.
__device__ __forceinline__ void prefetch_row_l2(const TableView& t, uint64_t slot) {
  if (slot >= t.hbm_rows) return;
  const float* row = t.hbm_values + slot * t.dim;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (t.dim % 4 == 0) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"(t.dim * 4u)
                 : "memory");
    return;
  }
#endif
  core::cuda::prefetch_range_l2(row, t.dim * sizeof(float), 0, 1);
}

// The slot of [first, first + 16) whose digest in `d` matches and whose key is key_bits (key
// loads confirm the matches in order), or -1.
template <bool kCoherent>
__device__ __forceinline__ int confirm_digest_matches(const TableView& t, uint64_t base,
                                                      uint32_t first, const uint4& d,
                                                      uint32_t pattern, uint64_t key_bits) {
  const uint32_t words[4] = {d.x, d.y, d.z, d.w};
  int hit = -1;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t m = __vcmpeq4(words[w], pattern);
    while (m != 0 && hit < 0) {
      const int byte = (__ffs(m) - 1) >> 3;
      m &= ~(0xFFu << (byte * 8));
      const uint32_t s = first + 4 * w + byte;
      if (load<kCoherent>(t.keys + base + s) == key_bits) hit = static_cast<int>(s);
    }
  }
  return hit;
}

// The slot index (inside the bucket) whose key equals `key_bits`, or -1. Every thread of the
// tile returns the same answer. With key_bits = kEmptyKey and digest = kEmptyDigest it finds
// an empty slot. A thread's uint4s of a round are all loaded before any is confirmed.
template <bool kCoherent, uint32_t kT>
__device__ __forceinline__ int find_in_bucket(const TileOf<kT>& tile, const TableView& t,
                                              uint64_t bucket, uint64_t key_bits, uint8_t digest) {
  constexpr uint32_t kVecs = kDigestVecs<kT>;
  const uint32_t pattern = 0x01010101u * digest;
  const uint64_t base = bucket * t.bucket_capacity;
  for (uint32_t round = 0; round < t.bucket_capacity; round += kRoundSlots<kT>) {
    const uint32_t mine = round + tile.thread_rank() * 16 * kVecs;
    int hit = -1;
    // One uint4 a thread (8-thread tiles) keeps its own form: the loop below compiles to other
    // code there, and cost find 8 registers and 9-15% (docs/cuda_table.md, "Tiles of 4 threads").
    if constexpr (kVecs == 1) {
      if (mine < t.bucket_capacity) {
        const uint4 d = load<kCoherent>(reinterpret_cast<const uint4*>(t.digests + base + mine));
        hit = confirm_digest_matches<kCoherent>(t, base, mine, d, pattern, key_bits);
      }
    } else {
      uint4 d[kVecs];
#pragma unroll
      for (uint32_t v = 0; v < kVecs; ++v) {
        if (mine + 16 * v < t.bucket_capacity)
          d[v] = load<kCoherent>(reinterpret_cast<const uint4*>(t.digests + base + mine + 16 * v));
      }
#pragma unroll
      for (uint32_t v = 0; v < kVecs; ++v) {
        if (hit < 0 && mine + 16 * v < t.bucket_capacity)
          hit = confirm_digest_matches<kCoherent>(t, base, mine + 16 * v, d[v], pattern, key_bits);
      }
    }
    const uint32_t ballot = tile.ballot(hit >= 0);
    if (ballot != 0) return tile.shfl(hit, __ffs(ballot) - 1);
  }
  return -1;
}

// find_in_bucket by one thread (lock-free readers only): a round loads 4 uint4s 32 bytes apart,
// so the four sectors of a 128-byte line of digests are asked for at once, and the next round
// reads their neighbours, which the first round brought into L1. 16 registers of digests where
// a whole line at once would take 32.
__device__ __forceinline__ int find_in_bucket_alone(const TableView& t, uint64_t bucket,
                                                    uint64_t key_bits, uint8_t digest) {
  const uint32_t pattern = 0x01010101u * digest;
  const uint64_t base = bucket * t.bucket_capacity;
  const auto* vecs = reinterpret_cast<const uint4*>(t.digests + base);
  const uint32_t count = t.bucket_capacity / 16;
  for (uint32_t line = 0; line < count; line += 8) {
#pragma unroll
    for (uint32_t half = 0; half < 2; ++half) {
      uint4 d[4];
#pragma unroll
      for (uint32_t v = 0; v < 4; ++v) {
        const uint32_t at = line + 2 * v + half;
        if (at < count) d[v] = vecs[at];
      }
#pragma unroll
      for (uint32_t v = 0; v < 4; ++v) {
        const uint32_t at = line + 2 * v + half;
        if (at < count) {
          const int hit = confirm_digest_matches<false>(t, base, 16 * at, d[v], pattern, key_bits);
          if (hit >= 0) return hit;
        }
      }
    }
  }
  return -1;
}

// 16 digest matches of one uint4 as a 16-bit mask (bit b: byte b equals the pattern's byte).
__device__ __forceinline__ uint32_t match_mask16(const uint4& d, uint32_t pattern) {
  const uint32_t words[4] = {d.x, d.y, d.z, d.w};
  uint32_t bits = 0;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t m = __vcmpeq4(words[w], pattern) & 0x01010101u;
    bits |= ((m * 0x01020408u) >> 24 & 0xFu) << (4 * w);
  }
  return bits;
}

// What one pass over a bucket found: the key's slot, the first empty slot (-1: none) and, when
// the key was not found, how many slots are empty (the bucket's size is the rest).
struct Probe {
  int found;
  int empty;
  uint32_t empties;
};

// One thread's share of a writer's probe, the 16 digests `d` of slots [first, first + 16):
// counts the empty ones and keeps the first (when want_empty, and `empty` is still -1), and
// confirms key candidates by key loads (while `hit` is -1).
__device__ __forceinline__ void probe_digests(const TableView& t, uint64_t base, uint32_t first,
                                              const uint4& d, uint32_t pattern, uint64_t key_bits,
                                              bool want_empty, bool prefetch_rows, int& hit,
                                              int& empty, uint32_t& empties) {
  if (want_empty) {
    const uint32_t empty_mask = match_mask16(d, 0x01010101u * kEmptyDigest);
    empties += __popc(empty_mask);
    if (empty_mask != 0 && empty < 0) empty = static_cast<int>(first) + __ffs(empty_mask) - 1;
  }
  uint32_t key_mask = hit < 0 ? match_mask16(d, pattern) : 0u;
  while (key_mask != 0) {
    const int ks = __ffs(key_mask) - 1;
    key_mask &= key_mask - 1;
    if (prefetch_rows) prefetch_row_l2(t, base + first + ks);
    if (__ldcg(t.keys + base + first + ks) == key_bits) {
      hit = static_cast<int>(first) + ks;
      key_mask = 0;
    }
  }
}

// Writers' probe (under the bucket lock): one pass over the digests finds the key's slot and,
// when `want_empty`, the first empty slot and the number of empty slots (so the bucket's size
// needs no load of its own). Each thread confirms its key candidates with key loads; an empty
// digest needs no load, since no stored key carries it. prefetch_rows: each candidate's row is
// asked of L2 beside its key (for callers that read the found row).
template <uint32_t kT>
__device__ __forceinline__ Probe probe_bucket(const TileOf<kT>& tile, const TableView& t,
                                              uint64_t bucket, uint64_t key_bits, uint8_t digest,
                                              bool want_empty, bool prefetch_rows) {
  constexpr uint32_t kVecs = kDigestVecs<kT>;
  const uint32_t pattern = 0x01010101u * digest;
  const uint64_t base = bucket * t.bucket_capacity;
  Probe result{-1, -1, 0};
  uint32_t empties = 0;
  for (uint32_t round = 0; round < t.bucket_capacity; round += kRoundSlots<kT>) {
    const uint32_t mine = round + tile.thread_rank() * 16 * kVecs;
    int hit = -1;
    int empty = -1;
    // One uint4 a thread: the form of before, as in find_in_bucket.
    if constexpr (kVecs == 1) {
      if (mine < t.bucket_capacity) {
        const uint4 d = __ldcg(reinterpret_cast<const uint4*>(t.digests + base + mine));
        probe_digests(t, base, mine, d, pattern, key_bits, want_empty, prefetch_rows, hit, empty,
                      empties);
      }
    } else {
      uint4 d[kVecs];
#pragma unroll
      for (uint32_t v = 0; v < kVecs; ++v) {
        if (mine + 16 * v < t.bucket_capacity)
          d[v] = __ldcg(reinterpret_cast<const uint4*>(t.digests + base + mine + 16 * v));
      }
#pragma unroll
      for (uint32_t v = 0; v < kVecs; ++v) {
        if (mine + 16 * v < t.bucket_capacity)
          probe_digests(t, base, mine + 16 * v, d[v], pattern, key_bits, want_empty, prefetch_rows,
                        hit, empty, empties);
      }
    }
    const uint32_t hits = tile.ballot(hit >= 0);
    if (hits != 0) {
      result.found = tile.shfl(hit, __ffs(hits) - 1);
      return result;
    }
    const uint32_t has_empty = tile.ballot(empty >= 0);
    if (has_empty != 0 && result.empty < 0) result.empty = tile.shfl(empty, __ffs(has_empty) - 1);
  }
  if (want_empty) result.empties = cg::reduce(tile, empties, cg::plus<uint32_t>());
  return result;
}

// Asks L2 for the bucket's digests ahead of the lock that guards them, so the lock's round trip
// and their fetch from HBM overlap (the probe then reads them from L2).
template <uint32_t kT>
__device__ __forceinline__ void prefetch_bucket_l2(const TileOf<kT>& tile, const TableView& t,
                                                   uint64_t bucket) {
  const uint8_t* digests = t.digests + bucket * t.bucket_capacity;
  for (uint32_t off = tile.thread_rank() * 128; off < t.bucket_capacity; off += kT * 128)
    core::cuda::prefetch_l2(digests + off);
}

// Takes the writer lock of a bucket for the whole tile (acquire: what the last holder wrote
// is visible to the tile's L1-bypassing loads). A relaxed CAS, which skips the acquire's L1
// invalidation, measured no faster on the H100 (docs/cuda_table.md).
template <uint32_t kT>
__device__ __forceinline__ void lock_bucket(const TileOf<kT>& tile, uint32_t* lock) {
  if (tile.thread_rank() == 0) {
    // Test and test-and-set with exponential backoff: waiting tiles read instead of hammering
    // L2 with atomics.
    uint32_t pause = 32;
    for (;;) {
      uint32_t old;
      asm volatile("atom.acquire.gpu.global.cas.b32 %0, [%1], 0, 1;"
                   : "=r"(old)
                   : "l"(lock)
                   : "memory");
      if (old == 0u) break;
      do {
        __nanosleep(pause);
        pause = pause < 1024 ? pause * 2 : pause;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(old) : "l"(lock) : "memory");
      } while (old != 0u);
    }
  }
  tile.sync();
}

// Publishes the tile's writes and releases the bucket's lock: the tile meets (bar.warp.sync
// orders every thread's writes before the leader's next operation) and the leader's release
// store, cumulative over what it has observed, hands the lock on.
template <uint32_t kT>
__device__ __forceinline__ void unlock_bucket(const TileOf<kT>& tile, uint32_t* lock) {
  tile.sync();
  if (tile.thread_rank() == 0) {
    asm volatile("st.release.gpu.global.u32 [%0], 0;" ::"l"(lock) : "memory");
  }
}

// Touches the score of a key found without its bucket's lock, as a locked write would, but
// atomically (copies of one key in a batch, and writers of the same kernel, touch it together).
// A timestamp only moves up (atomicMax): a timer value read before a writer's score-bound
// refresh can then never land below the bound (victim.cuh).
__device__ __forceinline__ void touch_score(uint64_t* score, ScorePolicy policy, bool has_given,
                                            uint64_t given, uint64_t now) {
  auto* word = reinterpret_cast<unsigned long long*>(score);
  if (policy == ScorePolicy::kLfu) {
    unsigned long long old = *word;
    for (;;) {
      const unsigned long long want = next_score(policy, true, old, has_given, given, now);
      const unsigned long long seen = atomicCAS(word, old, want);
      if (seen == old) return;
      old = seen;
    }
  }
  const auto value =
      static_cast<unsigned long long>(next_score(policy, true, 0, has_given, given, now));
  if (policy == ScorePolicy::kTimestamp) {
    atomicMax(word, value);
  } else {
    atomicExch(word, value);
  }
}

// The address of a stored row (HBM or mapped pinned host memory).
__device__ __forceinline__ float* row_of(const TableView& t, uint64_t slot) {
  return slot < t.hbm_rows ? t.hbm_values + slot * t.dim
                           : t.host_values + (slot - t.hbm_rows) * t.dim;
}

// dst[0, dim) = src[0, dim), spread over the tile; kVec copies float4s (dim % 4 == 0, aligned).
// dst and src never overlap (__restrict__), so a thread's next load need not wait for its store.
template <bool kVec, bool kCoherent, uint32_t kT>
__device__ __forceinline__ void copy_row(const TileOf<kT>& tile, float* dst, const float* src,
                                         uint32_t dim) {
  if constexpr (kVec) {
    auto* __restrict__ d4 = reinterpret_cast<float4*>(dst);
    const auto* __restrict__ s4 = reinterpret_cast<const float4*>(src);
    for (uint32_t j = tile.thread_rank(); j < dim / 4; j += kT) d4[j] = load<kCoherent>(s4 + j);
  } else {
    for (uint32_t j = tile.thread_rank(); j < dim; j += kT) dst[j] = load<kCoherent>(src + j);
  }
}

// dst[j] += src[j] for the row, spread over the tile (dst read coherently: writers only).
template <bool kVec, uint32_t kT>
__device__ __forceinline__ void accumulate_row(const TileOf<kT>& tile, float* dst, const float* src,
                                               uint32_t dim) {
  if constexpr (kVec) {
    auto* d4 = reinterpret_cast<float4*>(dst);
    const auto* s4 = reinterpret_cast<const float4*>(src);
    for (uint32_t j = tile.thread_rank(); j < dim / 4; j += kT) {
      float4 a = __ldcg(d4 + j);
      const float4 b = s4[j];
      a.x = __fadd_rn(a.x, b.x);
      a.y = __fadd_rn(a.y, b.y);
      a.z = __fadd_rn(a.z, b.z);
      a.w = __fadd_rn(a.w, b.w);
      d4[j] = a;
    }
  } else {
    for (uint32_t j = tile.thread_rank(); j < dim; j += kT) {
      dst[j] = __fadd_rn(__ldcg(dst + j), src[j]);
    }
  }
}

// The elements of the initializer's row of `key_bits` that are drawn (the rest are 0).
__device__ __forceinline__ uint32_t drawn_elements(const InitializerOptions& init, uint32_t dim) {
  return init.width != 0 && init.width < dim ? init.width : dim;
}

// initial_quad of a uniform initializer: one Philox draw.
__device__ __forceinline__ float4 uniform_quad(const InitializerOptions& init, uint64_t key_bits,
                                               uint32_t q, uint32_t drawn) {
  using namespace init_detail;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (4 * q < drawn) {
    const float span = det::sub(init.high, init.low);
    const Philox4 r = draw(init, key_bits, q, kUniformStream);
#pragma unroll
    for (uint32_t e = 0; e < 4; ++e) {
      if (4 * q + e < drawn) v[e] = det::fma(uniform01(r.w[e]), span, init.low);
    }
  }
  return make_float4(v[0], v[1], v[2], v[3]);
}

// uniform_quad's values from its draw r, without a branch (0 at or past `drawn`).
__device__ __forceinline__ float4 uniform_quad_of(const InitializerOptions& init, const Philox4& r,
                                                  uint32_t q, uint32_t drawn) {
  const float span = det::sub(init.high, init.low);
  float v[4];
#pragma unroll
  for (uint32_t e = 0; e < 4; ++e)
    v[e] = 4 * q + e < drawn ? det::fma(uniform01(r.w[e]), span, init.low) : 0.0f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// Elements [4q, 4q + 4) of the initializer's row of `key_bits`, each exactly initial_value's
// (0 at or past `drawn`): one Philox draw serves the quad (uniform), one each pair (normal).
// The uniform case returns early: sharing the others' live registers made the find_or_insert
// kernel spill (ptxas).
__device__ __forceinline__ float4 initial_quad(const InitializerOptions& init, uint64_t key_bits,
                                               uint32_t q, uint32_t drawn) {
  using namespace init_detail;
  if (init.kind == InitializerKind::kUniform) return uniform_quad(init, key_bits, q, drawn);
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (init.kind == InitializerKind::kNormal) {
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
      const uint32_t pair = 2 * q + h;
      if (2 * pair >= drawn) break;
      const Philox4 r = draw(init, key_bits, pair, kNormalStream);
      const float radius = det::sqrt(det::mul(-2.0f, det::log(uniform01_open_low(r.w[0]))));
      float sn, cs;
      det::sincos_2pi(uniform01(r.w[1]), &sn, &cs);
      v[2 * h] = det::fma(det::mul(radius, cs), init.stddev, init.mean);
      if (2 * pair + 1 < drawn)
        v[2 * h + 1] = det::fma(det::mul(radius, sn), init.stddev, init.mean);
    }
  } else {
#pragma unroll
    for (uint32_t e = 0; e < 4; ++e) {
      if (4 * q + e < drawn) v[e] = initial_value(init, key_bits, 4 * q + e);
    }
  }
  return make_float4(v[0], v[1], v[2], v[3]);
}

// Writes the initializer's row of `key_bits` to dst and, when set, to dst2: element j is
// exactly initial_value(init, key_bits, j), computed a quad at a time (initial_quad). kVec: stored
// as float4s (dim % 4 == 0, rows 16-byte aligned), else element by element. kPacked: a 16-bit
// initializer's row (init.value_type), word w = initial_word(init, key_bits, w), a word a thread.
// kPacked is a template argument, not a branch on init.value_type: the packed path inlined beside
// the float32 one costs the float32 kernels registers, and a call to an out-of-line packed path
// made ptxas copy the launch's parameters to local memory in every thread (docs/cuda_table.md).
template <bool kVec, bool kPacked, uint32_t kT>
__device__ __forceinline__ void init_row(const TileOf<kT>& tile, const InitializerOptions& init,
                                         uint64_t key_bits, float* dst, float* dst2, uint32_t dim) {
  if constexpr (kPacked) {
    for (uint32_t w = tile.thread_rank(); w < dim; w += kT) {
      const float v = __uint_as_float(initial_word(init, key_bits, w));
      dst[w] = v;
      if (dst2 != nullptr) dst2[w] = v;
    }
    return;
  }
  const uint32_t drawn = drawn_elements(init, dim);
  if constexpr (kVec) {
    auto* d4 = reinterpret_cast<float4*>(dst);
    auto* e4 = reinterpret_cast<float4*>(dst2);
    const uint32_t quads = dim / 4;
    if (init.kind == InitializerKind::kUniform && quads >= 2 * kT) {
      // Two quads a thread at a time: their Philox rounds are independent, so they interleave.
      for (uint32_t q = tile.thread_rank(); q < quads; q += 2 * kT) {
        const uint32_t q2 = q + kT;
        const Philox4 ra = init_detail::draw(init, key_bits, q, init_detail::kUniformStream);
        const Philox4 rb = init_detail::draw(init, key_bits, q2, init_detail::kUniformStream);
        const float4 a = uniform_quad_of(init, ra, q, drawn);
        const float4 b = uniform_quad_of(init, rb, q2, drawn);
        d4[q] = a;
        if (dst2 != nullptr) e4[q] = a;
        if (q2 < quads) {
          d4[q2] = b;
          if (dst2 != nullptr) e4[q2] = b;
        }
      }
      return;
    }
    for (uint32_t q = tile.thread_rank(); q < quads; q += kT) {
      const float4 v = initial_quad(init, key_bits, q, drawn);
      d4[q] = v;
      if (dst2 != nullptr) e4[q] = v;
    }
  } else {
    for (uint32_t q = tile.thread_rank(); 4 * q < dim; q += kT) {
      const float4 v = initial_quad(init, key_bits, q, drawn);
      const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (uint32_t k = 0; k < 4; ++k) {
        if (4 * q + k >= dim) break;
        dst[4 * q + k] = e[k];
        if (dst2 != nullptr) dst2[4 * q + k] = e[k];
      }
    }
  }
}

}  // namespace dynemb::table::cuda

// What shapes an inference embedding cache: key type, row width, capacity and associativity,
// and what a capacity costs in memory.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "dynemb/core/host_device.hpp"
#include "dynemb/core/options.hpp"

namespace dynemb::cache {

// The key types a cache accepts.
template <class K>
concept CacheKey =
    std::same_as<K, int32_t> || std::same_as<K, int64_t> || std::same_as<K, uint64_t>;

// The key's bit pattern, zero-extended to 64 bits (what the set hash sees).
template <CacheKey K>
DYNEMB_HD constexpr uint64_t cache_key_bits(K key) {
  return static_cast<uint64_t>(static_cast<std::make_unsigned_t<K>>(key));
}

// Everything that shapes a cache. Give the capacity either in rows or in bytes (one of the two).
template <CacheKey K>
struct CacheOptions {
  uint32_t dim = 0;                  // floats per row, > 0
  uint64_t capacity_rows = 0;        // rows the cache holds before it starts evicting
  uint64_t capacity_bytes = 0;       // or: the memory the cache may use (keys, stamps, rows, locks)
  uint32_t ways = 32;                // slots per set: 32, 64 or 128
  K empty_key = static_cast<K>(-1);  // marks a free slot; a real key equal to it is an error
  // Every call checks its keys for empty_key first and throws InvalidArgument naming the first
  // one (CUDA: one extra kernel and a stream synchronization per call). When false, such keys
  // are skipped (a query reports them missing) and counted in CacheStats::sentinel_keys.
  bool validate_keys = true;
  // A query lists its missing keys (each with its batch position) in batch order. When false,
  // the CUDA cache lists those of a batch up to 131,072 keys in the order its thread blocks
  // finish (in batch order within a block), so no block waits for the ones before it (as
  // HugeCTR's gpu_cache lists them); the CPU cache keeps batch order.
  bool misses_in_batch_order = true;
  // CUDA: a query of up to 131,072 keys launches its kernel as a one-kernel CUDA graph, one per
  // stream and launch shape, its parameters set per call: that takes about half the host time of
  // a kernel launch, most of a small query's time. When false, a kernel launch (the CPU cache
  // ignores it).
  bool query_graphs = true;
  int device = 0;  // CUDA backend: device ordinal
  bool operator==(const CacheOptions&) const = default;
};

// What a capacity costs: the layout the cache would allocate for the options.
struct CacheFootprint {
  uint64_t sets = 0;            // sets of `ways` slots
  uint64_t slots = 0;           // sets * ways
  uint64_t rows = 0;            // rows held before eviction starts (slots times the fill limit)
  uint64_t bytes = 0;           // memory the cache allocates, all buffers together
  uint64_t bytes_per_slot = 0;  // key + access stamp + row
};

// The fraction of slots a cache fills before keys start evicting each other (two candidate sets
// per key; measured, docs/cache.md): 0.9 for 32 ways, 0.95 for 64 or more.
double cache_fill_limit(uint32_t ways);

// The layout and memory `options` asks for on `backend` (the CPU pads each set's lock to a cache
// line, the GPU keeps a 4-byte version per set); throws InvalidArgument naming the first bad
// field, its value and its limit (dim 0, no capacity or both kinds given, ways not 32/64/128, a
// byte budget below two sets).
template <CacheKey K>
CacheFootprint cache_footprint(Backend backend, const CacheOptions<K>& options);

// Bytes a cache may allocate on `backend` (device memory free now, or the host's physical
// memory); make_cache refuses a footprint above this with OutOfMemory.
uint64_t cache_memory_available(Backend backend, int device);

}  // namespace dynemb::cache

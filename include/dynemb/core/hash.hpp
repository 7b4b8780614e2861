// The key hash and the key -> bucket / digest mapping shared by every backend, so a key lands
// in the same bucket on the CPU and on the GPU.
#pragma once

#include <cstdint>

#include "dynemb/core/host_device.hpp"

namespace dynemb {

// A 64-bit mix of the key bits (murmur3's finalizer): every input bit affects every output bit.
DYNEMB_HD constexpr uint64_t hash_key_bits(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// High 64 bits of the 128-bit product a * b.
DYNEMB_HD uint64_t mul_hi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// The bucket of a hash among `num_buckets` (any count; uses the hash's high bits). When the
// bucket count doubles, bucket b's keys move to 2b or 2b + 1 only.
DYNEMB_HD uint64_t bucket_of_hash(uint64_t hash, uint64_t num_buckets) {
  return mul_hi64(hash, num_buckets);
}

// A 7-bit fingerprint of the key, from the hash's low bits (independent of the bucket).
DYNEMB_HD constexpr uint8_t digest7_of_hash(uint64_t hash) {
  return static_cast<uint8_t>(hash & 0x7F);
}

// An 8-bit fingerprint of the key, from the hash's low bits (independent of the bucket).
DYNEMB_HD constexpr uint8_t digest8_of_hash(uint64_t hash) {
  return static_cast<uint8_t>(hash & 0xFF);
}

// Where probing starts inside a bucket of `bucket_capacity` slots (a power of two).
DYNEMB_HD constexpr uint32_t start_slot_of_hash(uint64_t hash, uint32_t bucket_capacity) {
  return static_cast<uint32_t>(hash >> 8) & (bucket_capacity - 1);
}

// The rank (of `world_size`) that owns a key in a sharded table. Uses a hash independent of
// the bucket hash, so each rank's keys still spread over all of its buckets.
DYNEMB_HD uint32_t rank_of_key_bits(uint64_t key_bits, uint32_t world_size) {
  return static_cast<uint32_t>(mul_hi64(
      hash_key_bits(key_bits ^ 0x2545F4914F6CDD1Dull) * 0x9E3779B97F4A7C15ull, world_size));
}

}  // namespace dynemb

// The CPU table's memory: per bucket a header (lock word, change counter, live count) and
// `bucket_capacity` slots; per slot a control byte, a key, a score and a value row.
//
// Control bytes (SwissTable-like): 0x00 = empty, 0x7F = deleted (tombstone), 0x80 | digest7 =
// full. Zeroed memory is an empty table. Slots are probed in groups of 16 control bytes
// compared at once with SSE2, starting at the group holding start_slot_of_hash and going
// group by group (wrapping inside the bucket); a lookup stops at the first group that has an
// empty slot. Invariant: a stored key's probe path from its start group to its own group
// crosses no empty slot.
#pragma once

#include <emmintrin.h>

#include <cstdint>
#include <cstring>

#include "dynemb/core/hash.hpp"
#include "table/cpu/large_array.hpp"

namespace dynemb::cpu {

inline constexpr uint8_t kCtrlEmpty = 0x00;
inline constexpr uint8_t kCtrlDeleted = 0x7F;
inline constexpr uint8_t kCtrlFullBit = 0x80;
inline constexpr uint32_t kGroupWidth = 16;

// The control byte of a stored key with this hash.
constexpr uint8_t ctrl_of_hash(uint64_t hash) {
  return kCtrlFullBit | digest7_of_hash(hash);
}

// A bucket's header; all fields are read and written only under `lock` (taken through
// lock_word).
struct alignas(16) BucketHeader {
  uint32_t lock;
  uint32_t version;  // bumped on every change of the bucket
  uint32_t live;     // stored keys
  uint32_t unused;
};

// The result of one probe: the key's slot (or -1) and the first free slot on its path (or -1).
struct Probe {
  int32_t found = -1;
  int32_t free = -1;
};

// The 16 control bytes of a group, with bit masks of what they hold.
class Group {
 public:
  explicit Group(const uint8_t* ctrl)
      : bytes_(_mm_load_si128(reinterpret_cast<const __m128i*>(ctrl))) {}
  // Slots whose control byte equals `c`.
  uint32_t match(uint8_t c) const {
    return static_cast<uint32_t>(
        _mm_movemask_epi8(_mm_cmpeq_epi8(bytes_, _mm_set1_epi8(static_cast<char>(c)))));
  }
  // Empty slots.
  uint32_t empties() const { return match(kCtrlEmpty); }
  // Empty or deleted slots.
  uint32_t frees() const { return ~static_cast<uint32_t>(_mm_movemask_epi8(bytes_)) & 0xFFFFu; }
  // Full slots.
  uint32_t fulls() const { return static_cast<uint32_t>(_mm_movemask_epi8(bytes_)); }

 private:
  __m128i bytes_;
};

class BucketStorage {
 public:
  BucketStorage() = default;
  // An empty table of num_buckets x bucket_capacity slots with rows of `dim` floats.
  BucketStorage(uint64_t num_buckets, uint32_t bucket_capacity, uint32_t dim);

  uint64_t num_buckets() const { return num_buckets_; }
  uint32_t bucket_capacity() const { return bucket_capacity_; }
  uint64_t capacity() const { return num_buckets_ * bucket_capacity_; }
  uint32_t dim() const { return dim_; }

  BucketHeader& header(uint64_t b) const { return headers_[b]; }
  uint8_t* ctrl(uint64_t b) const { return ctrl_.data() + b * bucket_capacity_; }
  uint64_t* keys(uint64_t b) const { return keys_.data() + b * bucket_capacity_; }
  uint64_t* scores(uint64_t b) const { return scores_.data() + b * bucket_capacity_; }
  float* row(uint64_t b, uint32_t slot) const {
    return values_.data() + (b * bucket_capacity_ + slot) * static_cast<uint64_t>(dim_);
  }
  bool is_full_slot(uint64_t b, uint32_t slot) const { return (ctrl(b)[slot] & kCtrlFullBit) != 0; }

  // The bucket a hash maps to.
  uint64_t bucket_of(uint64_t hash) const { return bucket_of_hash(hash, num_buckets_); }
  // The first group probed for a hash.
  uint32_t start_group(uint64_t hash) const {
    return start_slot_of_hash(hash, bucket_capacity_) / kGroupWidth;
  }

  // Prefetches the header, the first control group and the first keys of a probe.
  void prefetch_probe(uint64_t b, uint64_t hash) const {
    const uint32_t first = start_group(hash) * kGroupWidth;
    __builtin_prefetch(&headers_[b], 1);
    __builtin_prefetch(ctrl(b) + first);
    __builtin_prefetch(keys(b) + first);
    __builtin_prefetch(keys(b) + first + 8);
  }
  // Prefetches a value row (for writing when `write`).
  void prefetch_row(uint64_t b, uint32_t slot, bool write) const {
    const char* p = reinterpret_cast<const char*>(row(b, slot));
    const size_t bytes = static_cast<size_t>(dim_) * sizeof(float);
    for (size_t off = 0; off < bytes; off += 64) {
      if (write) {
        __builtin_prefetch(p + off, 1);
      } else {
        __builtin_prefetch(p + off, 0);
      }
    }
  }

  // The slot of `key_bits` in bucket b, or -1 (caller holds the bucket's lock).
  int32_t find(uint64_t b, uint64_t key_bits, uint64_t hash) const {
    const uint8_t* c = ctrl(b);
    const uint64_t* k = keys(b);
    const uint8_t want = ctrl_of_hash(hash);
    const uint32_t groups = bucket_capacity_ / kGroupWidth;
    uint32_t g = start_group(hash);
    for (uint32_t t = 0; t < groups; ++t, g = (g + 1) & (groups - 1)) {
      const uint32_t base = g * kGroupWidth;
      const Group grp(c + base);
      for (uint32_t m = grp.match(want); m != 0; m &= m - 1) {
        const uint32_t s = base + static_cast<uint32_t>(__builtin_ctz(m));
        if (k[s] == key_bits) return static_cast<int32_t>(s);
      }
      if (grp.empties() != 0) return -1;
    }
    return -1;
  }

  // find, plus the first free slot on the probe path (where a new key goes).
  Probe find_or_free(uint64_t b, uint64_t key_bits, uint64_t hash) const {
    const uint8_t* c = ctrl(b);
    const uint64_t* k = keys(b);
    const uint8_t want = ctrl_of_hash(hash);
    const uint32_t groups = bucket_capacity_ / kGroupWidth;
    uint32_t g = start_group(hash);
    Probe p;
    for (uint32_t t = 0; t < groups; ++t, g = (g + 1) & (groups - 1)) {
      const uint32_t base = g * kGroupWidth;
      const Group grp(c + base);
      for (uint32_t m = grp.match(want); m != 0; m &= m - 1) {
        const uint32_t s = base + static_cast<uint32_t>(__builtin_ctz(m));
        if (k[s] == key_bits) {
          p.found = static_cast<int32_t>(s);
          return p;
        }
      }
      const uint32_t frees = grp.frees();
      if (p.free < 0 && frees != 0) p.free = static_cast<int32_t>(base + __builtin_ctz(frees));
      if (grp.empties() != 0) break;
    }
    return p;
  }

  // Stores a new key in free slot `slot` (its row is left for the caller to write).
  void place(uint64_t b, uint32_t slot, uint64_t key_bits, uint64_t hash, uint64_t score) const {
    ctrl(b)[slot] = ctrl_of_hash(hash);
    keys(b)[slot] = key_bits;
    scores(b)[slot] = score;
    BucketHeader& h = header(b);
    ++h.live;
    ++h.version;
  }

  // Replaces the key in full slot `slot` by a new key (eviction; live count unchanged).
  void replace(uint64_t b, uint32_t slot, uint64_t key_bits, uint64_t hash, uint64_t score) const {
    ctrl(b)[slot] = ctrl_of_hash(hash);
    keys(b)[slot] = key_bits;
    scores(b)[slot] = score;
    ++header(b).version;
  }

  // Removes the key in full slot `slot`: the slot becomes empty if its group already has an
  // empty slot (no probe path crosses that group), else a tombstone.
  void remove(uint64_t b, uint32_t slot) const {
    uint8_t* c = ctrl(b);
    const uint32_t base = slot / kGroupWidth * kGroupWidth;
    c[slot] = Group(c + base).empties() != 0 ? kCtrlEmpty : kCtrlDeleted;
    BucketHeader& h = header(b);
    --h.live;
    ++h.version;
  }

  // The slot of the lowest score in bucket b (ties: smallest key bits); -1 if it is empty.
  int32_t lowest_score_slot(uint64_t b) const;

  // Empties every bucket (capacity kept).
  void clear();

 private:
  uint64_t num_buckets_ = 0;
  uint32_t bucket_capacity_ = 0;
  uint32_t dim_ = 0;
  LargeArray<BucketHeader> headers_;
  LargeArray<uint8_t> ctrl_;
  LargeArray<uint64_t> keys_;
  LargeArray<uint64_t> scores_;
  LargeArray<float> values_;
};

}  // namespace dynemb::cpu

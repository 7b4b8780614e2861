// The CPU table's memory: `bucket_capacity` slots per bucket; per slot a control byte, a key,
// a score and a value row (control bytes, key + score pairs and rows in three arrays). The bucket
// locks live elsewhere (lock_stripes.hpp); every access below needs the bucket's lock unless it
// says otherwise.
//
// Control bytes (SwissTable-like): 0x00 = empty, 0x7F = deleted (tombstone), 0x80 | digest7 =
// full. Zeroed memory is an empty table. Slots are probed in groups of 16 control bytes
// compared at once with SSE2, starting at the group holding start_slot_of_hash and going
// group by group (wrapping inside the bucket); a lookup stops at the first group that has an
// empty slot. Invariant: a stored key's probe path from its start group to its own group
// crosses no empty slot.
//
// Control bytes are written with 64-bit atomic stores so that predict_slot may read them
// without the lock (only to choose what to prefetch).
#pragma once

#include <emmintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "cpu/large_array.hpp"
#include "dynemb/core/hash.hpp"

namespace dynemb::table::cpu {

inline constexpr uint8_t kCtrlEmpty = 0x00;
inline constexpr uint8_t kCtrlDeleted = 0x7F;
inline constexpr uint8_t kCtrlFullBit = 0x80;
inline constexpr uint32_t kGroupWidth = 16;

// The control byte of a stored key with this hash.
constexpr uint8_t ctrl_of_hash(uint64_t hash) {
  return kCtrlFullBit | digest7_of_hash(hash);
}

// A slot's key bit pattern and score.
struct SlotEntry {
  uint64_t key;
  uint64_t score;
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
  explicit Group(__m128i bytes) : bytes_(bytes) {}
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
  // The bytes such a storage maps.
  static uint64_t bytes_for(uint64_t num_buckets, uint32_t bucket_capacity, uint32_t dim) {
    const uint64_t slots = num_buckets * bucket_capacity;
    return slots * (sizeof(uint8_t) + sizeof(SlotEntry) + uint64_t{dim} * sizeof(float));
  }

  uint64_t num_buckets() const { return num_buckets_; }
  uint32_t bucket_capacity() const { return bucket_capacity_; }
  uint64_t capacity() const { return num_buckets_ * bucket_capacity_; }
  uint32_t dim() const { return dim_; }

  uint8_t* ctrl(uint64_t b) const { return ctrl_.data() + b * bucket_capacity_; }
  // The key (bit pattern) and score of a slot, side by side so one cache line holds both.
  uint64_t& key(uint64_t b, uint32_t slot) const {
    return entries_[b * bucket_capacity_ + slot].key;
  }
  uint64_t& score(uint64_t b, uint32_t slot) const {
    return entries_[b * bucket_capacity_ + slot].score;
  }
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

  // Prefetches the first control group of a probe.
  void prefetch_ctrl(uint64_t b, uint64_t hash) const {
    __builtin_prefetch(ctrl(b) + start_group(hash) * kGroupWidth);
  }

  // Without the lock: the slot a probe for `hash` most likely ends at, judged from control
  // bytes only (read atomically): the first digest match on the probe path, else with
  // `want_free` the first free slot, else -1; -2 when `want_free` and the bucket has no free
  // slot (an insert may have to scan it for its lowest score). A guess that may be stale; use
  // it only for prefetching.
  int32_t predict_slot(uint64_t b, uint64_t hash, bool want_free) const {
    const uint8_t want = ctrl_of_hash(hash);
    const uint32_t groups = bucket_capacity_ / kGroupWidth;
    int32_t free = -1;
    uint32_t g = start_group(hash);
    for (uint32_t t = 0; t < groups; ++t, g = (g + 1) & (groups - 1)) {
      const uint32_t base = g * kGroupWidth;
      auto* words = reinterpret_cast<uint64_t*>(ctrl(b) + base);
      const uint64_t lo = std::atomic_ref<uint64_t>(words[0]).load(std::memory_order_relaxed);
      const uint64_t hi = std::atomic_ref<uint64_t>(words[1]).load(std::memory_order_relaxed);
      const Group grp(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
      if (const uint32_t m = grp.match(want); m != 0)
        return static_cast<int32_t>(base + __builtin_ctz(m));
      if (const uint32_t f = grp.frees(); free < 0 && f != 0)
        free = static_cast<int32_t>(base + __builtin_ctz(f));
      if (grp.empties() != 0) break;
    }
    if (!want_free) return -1;
    return free >= 0 ? free : -2;
  }

  // Prefetches the first `max_bytes` of the bucket's key/score entries (for a full-bucket
  // scan).
  void prefetch_entries(uint64_t b, size_t max_bytes) const {
    const char* p = reinterpret_cast<const char*>(&key(b, 0));
    const size_t bytes = std::min<size_t>(max_bytes, bucket_capacity_ * sizeof(SlotEntry));
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 1);
  }

  // Prefetches what an operation on `slot` touches: its key, and its score and row (for
  // writing when `write`).
  void prefetch_slot(uint64_t b, uint32_t slot, bool write) const {
    __builtin_prefetch(&key(b, slot), write ? 1 : 0);
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
    const SlotEntry* k = entries_.data() + b * bucket_capacity_;
    const uint8_t want = ctrl_of_hash(hash);
    const uint32_t groups = bucket_capacity_ / kGroupWidth;
    uint32_t g = start_group(hash);
    for (uint32_t t = 0; t < groups; ++t, g = (g + 1) & (groups - 1)) {
      const uint32_t base = g * kGroupWidth;
      const Group grp(c + base);
      for (uint32_t m = grp.match(want); m != 0; m &= m - 1) {
        const uint32_t s = base + static_cast<uint32_t>(__builtin_ctz(m));
        if (k[s].key == key_bits) return static_cast<int32_t>(s);
      }
      if (grp.empties() != 0) return -1;
    }
    return -1;
  }

  // find, plus the first free slot on the probe path (where a new key goes).
  Probe find_or_free(uint64_t b, uint64_t key_bits, uint64_t hash) const {
    const uint8_t* c = ctrl(b);
    const SlotEntry* k = entries_.data() + b * bucket_capacity_;
    const uint8_t want = ctrl_of_hash(hash);
    const uint32_t groups = bucket_capacity_ / kGroupWidth;
    uint32_t g = start_group(hash);
    Probe p;
    for (uint32_t t = 0; t < groups; ++t, g = (g + 1) & (groups - 1)) {
      const uint32_t base = g * kGroupWidth;
      const Group grp(c + base);
      for (uint32_t m = grp.match(want); m != 0; m &= m - 1) {
        const uint32_t s = base + static_cast<uint32_t>(__builtin_ctz(m));
        if (k[s].key == key_bits) {
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
    set_ctrl(b, slot, ctrl_of_hash(hash));
    key(b, slot) = key_bits;
    this->score(b, slot) = score;
  }

  // Replaces the key in full slot `slot` by a new key (eviction; live count unchanged).
  void replace(uint64_t b, uint32_t slot, uint64_t key_bits, uint64_t hash, uint64_t score) const {
    place(b, slot, key_bits, hash, score);
  }

  // Removes the key in full slot `slot`: the slot becomes empty if its group already has an
  // empty slot (no probe path crosses that group), else a tombstone.
  void remove(uint64_t b, uint32_t slot) const {
    const uint32_t base = slot / kGroupWidth * kGroupWidth;
    set_ctrl(b, slot, Group(ctrl(b) + base).empties() != 0 ? kCtrlEmpty : kCtrlDeleted);
  }

  // The slot of the lowest score in bucket b (ties: smallest key bits); -1 if it is empty.
  int32_t lowest_score_slot(uint64_t b) const;

  // Empties every bucket (capacity kept).
  void clear();

  // Faults in the memory of buckets [first, last) (before the storage is shared: ranges that
  // partition the buckets may run on several threads).
  void fault_in(uint64_t first, uint64_t last) const;

 private:
  // Writes one control byte through an atomic store of its 64-bit word.
  void set_ctrl(uint64_t b, uint32_t slot, uint8_t value) const {
    auto* word = reinterpret_cast<uint64_t*>(ctrl(b) + slot / 8 * 8);
    std::atomic_ref<uint64_t> w(*word);
    const unsigned shift = (slot % 8) * 8;
    const uint64_t old = w.load(std::memory_order_relaxed);
    w.store((old & ~(uint64_t{0xFF} << shift)) | (uint64_t{value} << shift),
            std::memory_order_relaxed);
  }

  uint64_t num_buckets_ = 0;
  uint32_t bucket_capacity_ = 0;
  uint32_t dim_ = 0;
  LargeArray<uint8_t> ctrl_;
  LargeArray<SlotEntry> entries_;
  LargeArray<float> values_;
};

}  // namespace dynemb::table::cpu

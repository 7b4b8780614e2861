// CpuTable: the batch writes. Every insert-type call runs `upsert` per key with a small hooks
// object that says where rows come from and go to.
#include <cstring>
#include <type_traits>

#include "arguments.hpp"
#include "cpu/cpu_table.hpp"
#include "cpu/row_initializer.hpp"
#include "dynemb/core/initializer.hpp"

namespace dynemb::table::cpu {

template <TableKey K>
template <class Hooks>
Step CpuTable<K>::upsert(const KeyAt& key, const BucketStorage& s, const ScoreInputs& in,
                         RefusalLog& refusals, Hooks& hooks) {
  const Probe& p = key.probe;
  const size_t i = key.index;
  const uint64_t bits = key.bits;
  const uint64_t b = key.bucket;
  if (p.found >= 0) {
    const auto slot = static_cast<uint32_t>(p.found);
    uint64_t& score = s.score(b, slot);
    score = in.next(i, true, score);
    hooks.existing(i, s.row(b, slot));
    return Step::kDone;
  }
  const uint64_t score = in.next(i, false, 0);
  if (p.free >= 0) {
    const bool at_max = s.capacity() >= options_.max_capacity;
    if (!key.budget->take(grow_threshold_, at_max)) return Step::kGrowForLoad;
    const auto slot = static_cast<uint32_t>(p.free);
    s.place(b, slot, bits, key.hash, score);
    hooks.inserted(i, bits, s.row(b, slot));
    return Step::kDone;
  }
  // The bucket is full: grow while we may, else evict its lowest-score entry or refuse.
  if (s.capacity() < options_.max_capacity) return Step::kGrowForFullBucket;
  const auto victim = static_cast<uint32_t>(s.lowest_score_slot(b));
  const uint64_t victim_score = s.score(b, victim);
  if (!may_evict(victim_score, score)) {
    refusals.note(i, bits, score, victim_score);
    hooks.refused(i, bits, score);
    return Step::kDone;
  }
  hooks.evicted(s.key(b, victim), s.row(b, victim), victim_score);
  evictions_.fetch_add(1, std::memory_order_relaxed);
  s.replace(b, victim, bits, key.hash, score);
  hooks.inserted(i, bits, s.row(b, victim));
  return Step::kDone;
}

template <TableKey K>
template <class Hooks>
void CpuTable<K>::run_upserts(const char* call, size_t n, const K* keys, const uint64_t* scores,
                              Hooks& hooks, bool refusals_returned) {
  screen_reserved(call, n, keys);
  const ScoreInputs in = clock_.for_call(scores);
  RefusalLog refusals(std::is_signed_v<K>);
  ReservedKeys reserved;
  for_keys<Access::kWrite>(
      n, keys,
      [&](const KeyAt& k, const BucketStorage& s) { return upsert(k, s, in, refusals, hooks); },
      [&](size_t i) {
        reserved.note(i);
        hooks.reserved(i);
      });
  report_reserved(call, keys, reserved);
  refused_.fetch_add(refusals.count(), std::memory_order_relaxed);
  // A call that hands refused rows back (insert_and_evict) never throws for them: the throw
  // would lose its count. ERROR degrades to WARNING there (docs/table_contract.md).
  const SafeCheck mode = refusals_returned && options_.safe_check == SafeCheck::kError
                             ? SafeCheck::kWarning
                             : options_.safe_check;
  refusals.report(mode, call);
}

// Hooks of the calls that store the caller's rows as they are.
struct StoreRowHooks {
  const float* values;
  size_t dim;
  size_t row_bytes;
  void existing(size_t i, float* row) const { std::memcpy(row, values + i * dim, row_bytes); }
  void inserted(size_t i, uint64_t, float* row) const { existing(i, row); }
  void evicted(uint64_t, const float*, uint64_t) const {}
  void refused(size_t, uint64_t, uint64_t) const {}
  void reserved(size_t) const {}
};

// Hooks shared by the copying find-or-inserts: a stored key's row is copied to values[i]; a
// key that was not stored (new, refused or reserved) gets founds[i] = false. Each call adds how
// a new key's row is made (`inserted`) and what a refused key's values[i] holds (`refused`).
struct CopyOutHooks {
  float* values;
  bool* founds;
  size_t dim;
  size_t row_bytes;
  void existing(size_t i, const float* row) const {
    std::memcpy(values + i * dim, row, row_bytes);
    if (founds) founds[i] = true;
  }
  void evicted(uint64_t, const float*, uint64_t) const {}
  void reserved(size_t i) const { not_found(i); }
  void not_found(size_t i) const {
    if (founds) founds[i] = false;
  }
};

template <TableKey K>
void CpuTable<K>::find_or_insert(size_t n, const K* keys, float* values, bool* founds,
                                 const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "find_or_insert", "keys");
  require_pointer(values, "find_or_insert", "values");
  struct Hooks : CopyOutHooks {
    const InitializerOptions& init;
    void inserted(size_t i, uint64_t bits, float* row) const {
      write_initial_row(init, bits, row, static_cast<uint32_t>(dim));
      std::memcpy(values + i * dim, row, row_bytes);
      not_found(i);
    }
    void refused(size_t i, uint64_t bits, uint64_t) const {
      write_initial_row(init, bits, values + i * dim, static_cast<uint32_t>(dim));
      not_found(i);
    }
  } hooks{{values, founds, options_.dim, row_bytes_}, options_.initializer};
  run_upserts("find_or_insert", n, keys, scores, hooks);
}

template <TableKey K>
void CpuTable<K>::find_or_insert_given(size_t n, const K* keys, float* values, bool* founds,
                                       const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "find_or_insert_given", "keys");
  require_pointer(values, "find_or_insert_given", "values");
  struct Hooks : CopyOutHooks {
    void inserted(size_t i, uint64_t, float* row) const {
      std::memcpy(row, values + i * dim, row_bytes);
      not_found(i);
    }
    void refused(size_t i, uint64_t, uint64_t) const { not_found(i); }
  } hooks{{values, founds, options_.dim, row_bytes_}};
  run_upserts("find_or_insert_given", n, keys, scores, hooks);
}

template <TableKey K>
void CpuTable<K>::find_or_insert_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                          const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "find_or_insert_pointers", "keys");
  require_pointer(rows, "find_or_insert_pointers", "rows");
  struct Hooks {
    float** rows;
    bool* founds;
    uint32_t dim;
    const InitializerOptions& init;
    void existing(size_t i, float* row) const {
      rows[i] = row;
      if (founds) founds[i] = true;
    }
    void inserted(size_t i, uint64_t bits, float* row) const {
      write_initial_row(init, bits, row, dim);
      rows[i] = row;
      if (founds) founds[i] = false;
    }
    void evicted(uint64_t, const float*, uint64_t) const {}
    void refused(size_t i, uint64_t, uint64_t) const {
      rows[i] = nullptr;
      if (founds) founds[i] = false;
    }
    void reserved(size_t i) const {
      rows[i] = nullptr;
      if (founds) founds[i] = false;
    }
  } hooks{rows, founds, static_cast<uint32_t>(options_.dim), options_.initializer};
  const uint64_t rehashes = rehashes_.load(), evictions = evictions_.load();
  run_upserts("find_or_insert_pointers", n, keys, scores, hooks);
  // A growth moved rows, or an eviction may have dropped a row this call inserted: the
  // addresses are looked up again (keys no longer stored get nullptr).
  if (rehashes_.load() != rehashes || evictions_.load() != evictions) {
    find_row_pointers(n, keys, rows, nullptr, nullptr, nullptr);
  }
}

template <TableKey K>
void CpuTable<K>::insert_or_assign(size_t n, const K* keys, const float* values,
                                   const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "insert_or_assign", "keys");
  require_pointer(values, "insert_or_assign", "values");
  StoreRowHooks hooks{values, options_.dim, row_bytes_};
  run_upserts("insert_or_assign", n, keys, scores, hooks);
}

template <TableKey K>
size_t CpuTable<K>::insert_and_evict(size_t n, const K* keys, const float* values,
                                     const uint64_t* scores, K* evicted_keys, float* evicted_values,
                                     uint64_t* evicted_scores, StreamHandle) {
  if (n == 0) return 0;
  require_pointer(keys, "insert_and_evict", "keys");
  require_pointer(values, "insert_and_evict", "values");
  require_pointer(evicted_keys, "insert_and_evict", "evicted_keys");
  struct Hooks : StoreRowHooks {
    K* out_keys;
    float* out_values;
    uint64_t* out_scores;
    std::atomic<size_t> count{0};
    void emit(uint64_t bits, const float* row, uint64_t score) {
      const size_t at = count.fetch_add(1, std::memory_order_relaxed);
      out_keys[at] = static_cast<K>(bits);
      if (out_values) std::memcpy(out_values + at * dim, row, row_bytes);
      if (out_scores) out_scores[at] = score;
    }
    void evicted(uint64_t bits, const float* row, uint64_t score) { emit(bits, row, score); }
    void refused(size_t i, uint64_t bits, uint64_t score) { emit(bits, values + i * dim, score); }
  } hooks;
  hooks.values = values;
  hooks.dim = options_.dim;
  hooks.row_bytes = row_bytes_;
  hooks.out_keys = evicted_keys;
  hooks.out_values = evicted_values;
  hooks.out_scores = evicted_scores;
  run_upserts("insert_and_evict", n, keys, scores, hooks, /*refusals_returned=*/true);
  return hooks.count.load();
}

template <TableKey K>
void CpuTable<K>::accum_or_assign(size_t n, const K* keys, const float* values,
                                  const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "accum_or_assign", "keys");
  require_pointer(values, "accum_or_assign", "values");
  table::detail::require_float32_rows(options_, "accum_or_assign");
  struct Hooks : StoreRowHooks {
    void existing(size_t i, float* row) const {
      const float* add = values + i * dim;
      for (size_t j = 0; j < dim; ++j) row[j] += add[j];
    }
  } hooks;
  hooks.values = values;
  hooks.dim = options_.dim;
  hooks.row_bytes = row_bytes_;
  run_upserts("accum_or_assign", n, keys, scores, hooks);
}

template <TableKey K>
void CpuTable<K>::assign(size_t n, const K* keys, const float* values, const uint64_t* scores,
                         StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "assign", "keys");
  require_pointer(values, "assign", "values");
  screen_reserved("assign", n, keys);
  ReservedKeys reserved;
  const ScoreInputs in = clock_.for_call(scores);
  const size_t dim = options_.dim;
  for_keys<Access::kWrite>(
      n, keys,
      [&](const KeyAt& k, const BucketStorage& s) {
        const int32_t slot = k.probe.found;
        if (slot >= 0) {
          uint64_t& score = s.score(k.bucket, slot);
          score = in.next(k.index, true, score);
          std::memcpy(s.row(k.bucket, static_cast<uint32_t>(slot)), values + k.index * dim,
                      row_bytes_);
        }
        return Step::kDone;
      },
      [&](size_t i) { reserved.note(i); });
  report_reserved("assign", keys, reserved);
}

template <TableKey K>
void CpuTable<K>::assign_scores(size_t n, const K* keys, const uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "assign_scores", "keys");
  require_pointer(scores, "assign_scores", "scores");
  screen_reserved("assign_scores", n, keys);
  ReservedKeys reserved;
  for_keys<Access::kRead>(
      n, keys,
      [&](const KeyAt& k, const BucketStorage& s) {
        if (k.probe.found >= 0) s.score(k.bucket, k.probe.found) = scores[k.index];
        return Step::kDone;
      },
      [&](size_t i) { reserved.note(i); });
  report_reserved("assign_scores", keys, reserved);
}

template <TableKey K>
void CpuTable<K>::erase(size_t n, const K* keys, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "erase", "keys");
  screen_reserved("erase", n, keys);
  ReservedKeys reserved;
  for_keys<Access::kRead>(
      n, keys,
      [&](const KeyAt& k, const BucketStorage& s) {
        if (k.probe.found >= 0) {
          s.remove(k.bucket, static_cast<uint32_t>(k.probe.found));
          k.budget->note_erased();
        }
        return Step::kDone;
      },
      [&](size_t i) { reserved.note(i); });
  report_reserved("erase", keys, reserved);
}

template void CpuTable<int64_t>::find_or_insert_pointers(size_t, const int64_t*, float**, bool*,
                                                         const uint64_t*, StreamHandle);
template void CpuTable<int64_t>::find_or_insert(size_t, const int64_t*, float*, bool*,
                                                const uint64_t*, StreamHandle);
template void CpuTable<int64_t>::find_or_insert_given(size_t, const int64_t*, float*, bool*,
                                                      const uint64_t*, StreamHandle);
template void CpuTable<int64_t>::insert_or_assign(size_t, const int64_t*, const float*,
                                                  const uint64_t*, StreamHandle);
template size_t CpuTable<int64_t>::insert_and_evict(size_t, const int64_t*, const float*,
                                                    const uint64_t*, int64_t*, float*, uint64_t*,
                                                    StreamHandle);
template void CpuTable<int64_t>::accum_or_assign(size_t, const int64_t*, const float*,
                                                 const uint64_t*, StreamHandle);
template void CpuTable<int64_t>::assign(size_t, const int64_t*, const float*, const uint64_t*,
                                        StreamHandle);
template void CpuTable<int64_t>::assign_scores(size_t, const int64_t*, const uint64_t*,
                                               StreamHandle);
template void CpuTable<int64_t>::erase(size_t, const int64_t*, StreamHandle);
template void CpuTable<uint64_t>::find_or_insert_pointers(size_t, const uint64_t*, float**, bool*,
                                                          const uint64_t*, StreamHandle);
template void CpuTable<uint64_t>::find_or_insert(size_t, const uint64_t*, float*, bool*,
                                                 const uint64_t*, StreamHandle);
template void CpuTable<uint64_t>::find_or_insert_given(size_t, const uint64_t*, float*, bool*,
                                                       const uint64_t*, StreamHandle);
template void CpuTable<uint64_t>::insert_or_assign(size_t, const uint64_t*, const float*,
                                                   const uint64_t*, StreamHandle);
template size_t CpuTable<uint64_t>::insert_and_evict(size_t, const uint64_t*, const float*,
                                                     const uint64_t*, uint64_t*, float*, uint64_t*,
                                                     StreamHandle);
template void CpuTable<uint64_t>::accum_or_assign(size_t, const uint64_t*, const float*,
                                                  const uint64_t*, StreamHandle);
template void CpuTable<uint64_t>::assign(size_t, const uint64_t*, const float*, const uint64_t*,
                                         StreamHandle);
template void CpuTable<uint64_t>::assign_scores(size_t, const uint64_t*, const uint64_t*,
                                                StreamHandle);
template void CpuTable<uint64_t>::erase(size_t, const uint64_t*, StreamHandle);

}  // namespace dynemb::table::cpu

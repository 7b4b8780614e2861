// The collection's combined batch on the host (include/dynemb/ops/table_keys.hpp).
#include <algorithm>

#include "cpu/cpu_kernels.hpp"
#include "dynemb/ops/table_keys.hpp"

namespace dynemb::ops::detail {

template <TableKey K>
void combine_table_keys_cpu(uint32_t table, uint32_t shift, size_t n, const K* keys,
                            const int64_t* offsets, size_t num_bags, uint64_t base,
                            uint64_t bag_base, uint64_t* combined_keys, int64_t* combined_offsets,
                            uint64_t* status) {
  const uint64_t tag = table_tag(table, shift);
  uint64_t seen = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = key_bits(keys[i]);
    seen |= bits;
    combined_keys[base + i] = bits | tag;
  }
  status[kKeyBitsSeen] |= seen;
  bool bad = offsets[0] != 0 || offsets[num_bags] != static_cast<int64_t>(n);
  for (size_t b = 0; b <= num_bags; ++b) {
    const int64_t o = std::clamp<int64_t>(offsets[b], 0, static_cast<int64_t>(n));
    combined_offsets[bag_base + b] = o + static_cast<int64_t>(base);
    if (b > 0 && offsets[b] < offsets[b - 1]) bad = true;
  }
  if (bad) status[kBadTableFlag] = std::max(status[kBadTableFlag], ~uint64_t{0} - table);
}

template <TableKey K>
void split_table_keys_cpu(size_t u, const uint64_t* unique_keys, uint32_t num_tables,
                          uint32_t shift, K* keys, uint64_t* bounds) {
  const uint64_t mask = id_mask(shift);
  for (size_t i = 0; i < u; ++i) keys[i] = static_cast<K>(unique_keys[i] & mask);
  for (uint32_t t = 0; t <= num_tables; ++t) {
    bounds[t] = t == num_tables
                    ? u
                    : static_cast<uint64_t>(
                          std::lower_bound(unique_keys, unique_keys + u, table_tag(t, shift)) -
                          unique_keys);
  }
}

// Whether the combined batch must be refused (a flagged table, or a key wider than key_limit).
bool spread_refused(const TableSpread& s) {
  if (s.status[kBadTableFlag] != 0) return true;
  return s.key_limit < 64 && (s.status[kKeyBitsSeen] >> s.key_limit) != 0;
}

void spread_table_keys_cpu(const TableSpread& s) {
  const size_t u = *s.unique_count;
  const bool refused = spread_refused(s);
  split_table_keys_cpu(u, s.unique_combined, s.num_tables, s.shift, s.keys, s.bounds);
  for (uint32_t t = 0; t < s.num_tables; ++t) {
    s.counts[t] = refused ? 0 : s.bounds[t + 1] - s.bounds[t];
    s.counters[size_t{t} * s.counter_stride + s.unique_index] += s.counts[t];
    s.counters[size_t{t} * s.counter_stride + s.lookups_index] += s.id_base[t + 1] - s.id_base[t];
    for (uint64_t j = 0; j < s.counts[t]; ++j) {
      s.padded_keys[s.id_base[t] + j] = s.keys[s.bounds[t] + j];
    }
  }
  if (refused) *s.refused += 1;
}

void gather_table_rows_cpu(const TableSpread& s, const TableRows& r) {
  const size_t u = *s.unique_count;
  for (uint32_t t = 0; t < s.num_tables; ++t) {
    uint64_t* counters = r.counters + size_t{t} * r.counter_stride;
    for (uint64_t j = 0; j < s.counts[t]; ++j) {
      const uint64_t p = s.id_base[t] + j, row = s.bounds[t] + j;
      float* address = r.padded_rows[p];
      const bool none = address == nullptr;
      r.rows[row] = none ? r.fallback + row * r.fallback_stride : address;
      r.missing[row] = none;
      if (r.training && !none && !r.padded_founds[p]) ++counters[r.created_index];
      if (!r.training && none) ++counters[r.missing_index];
    }
  }
  // Rows no table answered: the padding after u, and every row of a refused batch.
  const size_t first = spread_refused(s) ? 0 : u;
  for (size_t row = first; row < s.n; ++row) {
    r.rows[row] = r.fallback + row * r.fallback_stride;
    r.missing[row] = true;
    if (row >= u) r.row_begin[row + 1] = static_cast<uint32_t>(s.n);
  }
}

template void combine_table_keys_cpu<int64_t>(uint32_t, uint32_t, size_t, const int64_t*,
                                              const int64_t*, size_t, uint64_t, uint64_t, uint64_t*,
                                              int64_t*, uint64_t*);
template void combine_table_keys_cpu<uint64_t>(uint32_t, uint32_t, size_t, const uint64_t*,
                                               const int64_t*, size_t, uint64_t, uint64_t,
                                               uint64_t*, int64_t*, uint64_t*);
template void split_table_keys_cpu<int64_t>(size_t, const uint64_t*, uint32_t, uint32_t, int64_t*,
                                            uint64_t*);
template void split_table_keys_cpu<uint64_t>(size_t, const uint64_t*, uint32_t, uint32_t, uint64_t*,
                                             uint64_t*);

}  // namespace dynemb::ops::detail

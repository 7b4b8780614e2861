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
  for (size_t b = 0; b <= num_bags; ++b) {
    combined_offsets[bag_base + b] = offsets[b] + static_cast<int64_t>(base);
  }
  if (offsets[0] != 0 || offsets[num_bags] != static_cast<int64_t>(n)) {
    status[kBadTableFlag] = std::max(status[kBadTableFlag], ~uint64_t{0} - table);
  }
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

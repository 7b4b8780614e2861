#include <algorithm>
#include <bit>
#include <vector>

#include "cpu/cpu_kernels.hpp"
#include "dynemb/core/hash.hpp"

namespace dynemb::ops::detail {

// Hash-based: one pass assigns first-seen ids, the (few) unique keys are sorted, and a second
// pass reads each key's rank. O(n + u log u) instead of sorting the whole batch.
template <TableKey K>
size_t dedup_cpu(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts) {
  if (n == 0) return 0;
  const size_t slots = std::bit_ceil(2 * n);
  const size_t mask = slots - 1;
  constexpr uint32_t kFree = ~0u;
  std::vector<uint32_t> slot_id(slots, kFree);  // first-seen id of the key in each slot
  std::vector<K> seen;
  seen.reserve(n / 4 + 16);
  std::vector<uint32_t> first_seen_id(n);
  for (size_t i = 0; i < n; ++i) {
    size_t s = hash_key_bits(key_bits(keys[i])) & mask;
    while (true) {
      const uint32_t id = slot_id[s];
      if (id == kFree) {
        slot_id[s] = static_cast<uint32_t>(seen.size());
        first_seen_id[i] = static_cast<uint32_t>(seen.size());
        seen.push_back(keys[i]);
        break;
      }
      if (seen[id] == keys[i]) {
        first_seen_id[i] = id;
        break;
      }
      s = (s + 1) & mask;
    }
  }
  const size_t u = seen.size();
  std::vector<uint32_t> order(u);
  for (uint32_t id = 0; id < u; ++id) order[id] = id;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return seen[a] < seen[b]; });
  std::vector<uint32_t> rank(u);
  for (uint32_t r = 0; r < u; ++r) {
    rank[order[r]] = r;
    unique_keys[r] = seen[order[r]];
  }
  if (counts != nullptr) std::fill(counts, counts + u, 0u);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rank[first_seen_id[i]];
    inverse[i] = r;
    if (counts != nullptr) ++counts[r];
  }
  return u;
}

template size_t dedup_cpu<int64_t>(size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*);
template size_t dedup_cpu<uint64_t>(size_t, const uint64_t*, uint64_t*, uint32_t*, uint32_t*);

}  // namespace dynemb::ops::detail

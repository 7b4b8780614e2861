// CpuTable: the batch reads (find, find_with_misses, contains). They take each bucket's lock
// but never change a row or a score.
#include <cstring>
#include <vector>

#include "cpu/cpu_table.hpp"

namespace dynemb::table::cpu {

template <TableKey K>
void CpuTable<K>::find(size_t n, const K* keys, float* values, bool* founds, uint64_t* scores,
                       StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "find", "keys");
  require_pointer(values, "find", "values");
  find_rows("find", n, keys, values, founds, scores);
}

template <TableKey K>
void CpuTable<K>::find_rows(const char* call, size_t n, const K* keys, float* values, bool* founds,
                            uint64_t* scores) {
  screen_reserved(call, n, keys);
  ReservedKeys reserved;
  const size_t dim = options_.dim;
  for_keys<Access::kRead>(
      n, keys,
      [&](const KeyAt& k, const BucketStorage& s) {
        const int32_t slot = k.probe.found;
        if (slot >= 0) {
          std::memcpy(values + k.index * dim, s.row(k.bucket, static_cast<uint32_t>(slot)),
                      row_bytes_);
          if (scores) scores[k.index] = s.score(k.bucket, slot);
        }
        if (founds) founds[k.index] = slot >= 0;
        return Step::kDone;
      },
      [&](size_t i) {
        reserved.note(i);
        if (founds) founds[i] = false;
      });
  report_reserved(call, keys, reserved);
}

template <TableKey K>
void CpuTable<K>::find_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                uint64_t* scores, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "find_pointers", "keys");
  require_pointer(rows, "find_pointers", "rows");
  screen_reserved("find_pointers", n, keys);
  ReservedKeys reserved;
  find_row_pointers(n, keys, rows, founds, scores, &reserved);
  report_reserved("find_pointers", keys, reserved);
}

template <TableKey K>
void CpuTable<K>::find_row_pointers(size_t n, const K* keys, float** rows, bool* founds,
                                    uint64_t* scores, ReservedKeys* reserved) {
  for_keys<Access::kRead>(
      n, keys,
      [&](const KeyAt& k, const BucketStorage& s) {
        const int32_t slot = k.probe.found;
        rows[k.index] = slot >= 0 ? s.row(k.bucket, static_cast<uint32_t>(slot)) : nullptr;
        if (slot >= 0 && scores) scores[k.index] = s.score(k.bucket, slot);
        if (founds) founds[k.index] = slot >= 0;
        return Step::kDone;
      },
      [&](size_t i) {
        if (reserved) reserved->note(i);
        rows[i] = nullptr;
        if (founds) founds[i] = false;
      });
}

template <TableKey K>
size_t CpuTable<K>::find_with_misses(size_t n, const K* keys, float* values, K* missed_keys,
                                     uint64_t* missed_indices, uint64_t* scores, StreamHandle) {
  if (n == 0) return 0;
  require_pointer(keys, "find_with_misses", "keys");
  require_pointer(values, "find_with_misses", "values");
  require_pointer(missed_keys, "find_with_misses", "missed_keys");
  require_pointer(missed_indices, "find_with_misses", "missed_indices");
  std::unique_ptr<bool[]> founds(new bool[n]);
  find_rows("find_with_misses", n, keys, values, founds.get(), scores);
  size_t missed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (founds[i]) continue;
    missed_keys[missed] = keys[i];
    missed_indices[missed] = i;
    ++missed;
  }
  return missed;
}

template <TableKey K>
void CpuTable<K>::contains(size_t n, const K* keys, bool* founds, StreamHandle) {
  if (n == 0) return;
  require_pointer(keys, "contains", "keys");
  require_pointer(founds, "contains", "founds");
  screen_reserved("contains", n, keys);
  ReservedKeys reserved;
  for_keys<Access::kRead>(
      n, keys,
      [&](const KeyAt& k, const BucketStorage&) {
        founds[k.index] = k.probe.found >= 0;
        return Step::kDone;
      },
      [&](size_t i) {
        reserved.note(i);
        founds[i] = false;
      });
  report_reserved("contains", keys, reserved);
}

template void CpuTable<int64_t>::find(size_t, const int64_t*, float*, bool*, uint64_t*,
                                      StreamHandle);
template size_t CpuTable<int64_t>::find_with_misses(size_t, const int64_t*, float*, int64_t*,
                                                    uint64_t*, uint64_t*, StreamHandle);
template void CpuTable<int64_t>::contains(size_t, const int64_t*, bool*, StreamHandle);
template void CpuTable<int64_t>::find_pointers(size_t, const int64_t*, float**, bool*, uint64_t*,
                                               StreamHandle);
template void CpuTable<int64_t>::find_row_pointers(size_t, const int64_t*, float**, bool*,
                                                   uint64_t*, ReservedKeys*);
template void CpuTable<uint64_t>::find(size_t, const uint64_t*, float*, bool*, uint64_t*,
                                       StreamHandle);
template size_t CpuTable<uint64_t>::find_with_misses(size_t, const uint64_t*, float*, uint64_t*,
                                                     uint64_t*, uint64_t*, StreamHandle);
template void CpuTable<uint64_t>::contains(size_t, const uint64_t*, bool*, StreamHandle);
template void CpuTable<uint64_t>::find_pointers(size_t, const uint64_t*, float**, bool*, uint64_t*,
                                                StreamHandle);
template void CpuTable<uint64_t>::find_row_pointers(size_t, const uint64_t*, float**, bool*,
                                                    uint64_t*, ReservedKeys*);

}  // namespace dynemb::table::cpu

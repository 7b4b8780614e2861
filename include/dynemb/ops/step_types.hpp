// What a training step's ops pass between them: a batch's ids grouped by row, and the device words
// a dedup reads back in its one synchronization.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dynemb::ops::detail {

// A batch's ids grouped by the row they read: row r's ids, ascending, are
// ids_by_row[row_begin[r] .. row_begin[r + 1]). Backend memory.
struct IdGroups {
  // num_ids entries, or null where bag_by_row is given and the reduction reads no id (pooled,
  // without weights).
  const uint32_t* ids_by_row = nullptr;
  const uint32_t* row_begin = nullptr;  // num_rows + 1 entries
  // num_ids entries, the bag holding id ids_by_row[k] (a pooled batch's), or null: the reduction
  // works it out from the offsets.
  const uint32_t* bag_by_row = nullptr;
};

// Device words read back together with dedup_grouped's unique count (one synchronization).
struct ReadAlong {
  const uint64_t* counters = nullptr;  // backend memory
  size_t count = 0;
  uint64_t* host = nullptr;
};

}  // namespace dynemb::ops::detail

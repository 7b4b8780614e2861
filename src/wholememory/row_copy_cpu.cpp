// Row copies on host threads.
#include <algorithm>
#include <cstring>

#include "dynemb/core/thread_pool.hpp"
#include "row_copy.hpp"

namespace dynemb::wholememory {
namespace {

core::ThreadPool& pool() {
  static core::ThreadPool instance(0);
  return instance;
}

}  // namespace

void copy_rows_cpu(const RowSpace& space, const int64_t* index, size_t n, char* buffer,
                   uint64_t buffer_stride, bool gather) {
  auto copy_range = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const uint64_t row = static_cast<uint64_t>(index[i]);
      const uint64_t part = row / space.rows_per_part;
      char* at = space.parts[part] + (row - part * space.rows_per_part) * space.entry_bytes +
                 space.offset_bytes;
      char* b = buffer + i * buffer_stride;
      if (gather) {
        std::memcpy(b, at, space.copy_bytes);
      } else {
        std::memcpy(at, b, space.copy_bytes);
      }
    }
  };
  // Small copies on this thread; large ones in chunks of at least 1 MiB over the pool.
  const size_t bytes = n * space.copy_bytes;
  if (bytes < (4u << 20) || pool().threads() == 1) {
    copy_range(0, n);
    return;
  }
  const size_t chunk = std::max<size_t>(1, (1u << 20) / std::max<uint64_t>(1, space.copy_bytes));
  const size_t tasks = (n + chunk - 1) / chunk;
  pool().run(tasks, [&](size_t t) { copy_range(t * chunk, std::min(n, (t + 1) * chunk)); });
}

}  // namespace dynemb::wholememory

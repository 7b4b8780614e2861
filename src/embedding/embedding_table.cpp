#include "embedding/embedding_table.hpp"

#include <chrono>
#include <cstdint>

namespace dynemb::detail {

TableOptions embedding_table_options(const EmbeddingOptions& o) {
  TableOptions t = o.table;
  t.dim = embedding_row_dim(o);
  t.initializer.width = o.dim;  // optimizer state (and padding) starts at 0
  return t;
}

template <TableKey K>
size_t expire_rows(Table<K>& table, const EmbeddingOptions& options) {
  if (options.ttl_steps > 0) {
    const uint64_t step = table.score();
    if (step < options.ttl_steps) return 0;
    return table.erase_if({ScoreCompare::kLessEqual, step - options.ttl_steps});
  }
  if (options.ttl_seconds > 0.0) {
    const uint64_t now =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    const auto ttl_ns = static_cast<uint64_t>(options.ttl_seconds * 1e9);
    if (now > ttl_ns) return table.erase_if({ScoreCompare::kLess, now - ttl_ns});
  }
  return 0;
}

template size_t expire_rows<int64_t>(Table<int64_t>&, const EmbeddingOptions&);
template size_t expire_rows<uint64_t>(Table<uint64_t>&, const EmbeddingOptions&);

}  // namespace dynemb::detail

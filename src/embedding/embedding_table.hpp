// What a trainable table's Table is and how its rows expire: shared by Embedding and
// EmbeddingCollection.
#pragma once

#include <cstddef>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"

namespace dynemb::detail {

// The Table's options for an embedding: dim set to the row (embedding + optimizer state +
// padding), the initializer drawing only the embedding part (state starts at 0).
TableOptions embedding_table_options(const EmbeddingOptions& options);

// Erases the rows past the options' TTL (steps or seconds; none when both are 0) and returns
// how many; does not advance the step.
template <TableKey K>
size_t expire_rows(Table<K>& table, const EmbeddingOptions& options);

// Grows `buffer` to at least `count` elements (contents are not kept); never leaves it
// unallocated, so an empty batch still passes valid pointers on.
template <class T>
void ensure_buffer(BackendBuffer<T>& buffer, Backend backend, size_t count, int device) {
  if (buffer.data() == nullptr || buffer.size() < count) {
    buffer = BackendBuffer<T>(backend, count + count / 4 + 16, device);
  }
}

}  // namespace dynemb::detail

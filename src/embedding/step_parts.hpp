// The parts of a training step that Embedding and EmbeddingCollection share: the table's options,
// expiry, buffer growth, the step's lookup feature, the rows of keys without a row, and the
// report of non-finite gradients.
#pragma once

#include <cstddef>

#include <cstdint>

#include "dynemb/core/memory.hpp"
#include "dynemb/embedding/embedding.hpp"
#include "dynemb/ops/pooling.hpp"

namespace dynemb::embedding::detail {

// The Table's options for an embedding: dim set to the row (embedding + optimizer state +
// padding), the initializer drawing only the embedding part (state starts at 0).
TableOptions embedding_table_options(const EmbeddingOptions& options);

// The options with value_type copied where the ops read it: the optimizer's value_type and
// stochastic_rounding, and the evaluation initializer's value_type (16-bit: drawing dim elements).
EmbeddingOptions with_value_type(const EmbeddingOptions& options);

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

// The lookup feature of a step over its unique keys' rows: by address when row_ptrs is set, else
// the dense rows [num_unique x row_dim].
LookupFeature step_feature(const float* rows, const float* const* row_ptrs, uint32_t dim,
                           uint32_t row_dim, size_t num_unique, const uint32_t* inverse,
                           size_t num_ids, const int64_t* offsets, size_t num_bags,
                           const float* weights, PoolingMode mode,
                           ValueType value_type = ValueType::kFloat32);

// What keys without a row read: one shared row of zeros when the evaluation initializer is
// zeros, else a row per unique key (drawn by fill_initial_rows for the missing ones).
struct FallbackRows {
  BackendBuffer<float> rows;
  bool zero_row = false;  // rows holds one row of zeros (stride 0)

  // Makes room for `count` keys of `dim` words; returns the stride between keys' rows (0: the
  // one shared zero row).
  uint32_t prepare(Backend backend, const InitializerOptions& eval, uint32_t dim, size_t count,
                   int device, StreamHandle stream);
};

// Logs (WARNING) the non-finite gradient rows a step's device counter added since the last
// report.
class NonfiniteReport {
 public:
  // `total`: the counter's value now; `where` names the backward in the message.
  void update(uint64_t total, SafeCheck mode, const char* where);

 private:
  uint64_t reported_ = 0;
};

}  // namespace dynemb::embedding::detail

#include "step_parts.hpp"

#include <bit>
#include <chrono>
#include <string>

#include "dynemb/core/log.hpp"
#include "dynemb/ops/step_ops.hpp"

namespace dynemb::embedding::detail {

TableOptions embedding_table_options(const EmbeddingOptions& o) {
  TableOptions t = o.table;
  t.dim = embedding_row_dim(o);
  t.initializer.width = o.dim;  // optimizer state (and padding) starts at 0
  t.initializer.value_type = o.value_type;
  return t;
}

EmbeddingOptions with_value_type(const EmbeddingOptions& options) {
  EmbeddingOptions o = options;
  o.optimizer.value_type = o.value_type;
  o.optimizer.stochastic_rounding = o.stochastic_rounding;
  o.optimizer.state_in_value_type = o.state_in_value_type;
  o.eval_initializer.value_type = o.value_type;
  if (o.value_type != ValueType::kFloat32) o.eval_initializer.width = o.dim;
  return o;
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

LookupFeature step_feature(const float* rows, const float* const* row_ptrs, uint32_t dim,
                           uint32_t row_dim, size_t num_unique, const uint32_t* inverse,
                           size_t num_ids, const int64_t* offsets, size_t num_bags,
                           const float* weights, PoolingMode mode, ValueType value_type) {
  LookupFeature f = ops::detail::offsets_feature(num_ids, inverse, num_unique, offsets, num_bags);
  if (row_ptrs != nullptr) {
    f.row_ptrs = row_ptrs;
  } else {
    f.rows = rows;
  }
  f.row_stride = row_dim;
  f.dim = dim;
  f.weights = weights;
  f.mode = mode;
  f.value_type = value_type;
  return f;
}

uint32_t FallbackRows::prepare(Backend backend, const InitializerOptions& eval, uint32_t dim,
                               size_t count, int device, StreamHandle stream) {
  const bool zeros =
      eval.kind == InitializerKind::kConstant && std::bit_cast<uint32_t>(eval.value) == 0;
  if (zeros) {
    if (!zero_row || rows.size() < dim) {
      rows = BackendBuffer<float>(backend, dim, device);
      backend_zero(backend, rows.data(), dim * sizeof(float), stream);
      zero_row = true;
    }
    return 0;
  }
  ensure_buffer(rows, backend, count * dim, device);
  zero_row = false;
  return dim;
}

void NonfiniteReport::update(uint64_t total, SafeCheck mode, const char* where) {
  if (total <= reported_) return;
  const uint64_t fresh = total - reported_;
  reported_ = total;
  if (mode == SafeCheck::kWarning) {
    warn(std::string(where) + ": grad held NaN or Inf for " + std::to_string(fresh) +
         " keys since the last report; those rows were skipped");
  }
}

}  // namespace dynemb::embedding::detail

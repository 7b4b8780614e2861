// dedup, pooling and gradient reduction: their arguments checked, then the backend's ops.
#include "dynemb/core/error.hpp"
#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/ops_backend.hpp"
#include "dynemb/ops/step_ops.hpp"

namespace dynemb {
namespace {

// Shape checks, then the offsets / indices checks on the backend that holds them.
void validate_lookup_shape_and_data(const OpsBackend& ops, std::span<const LookupFeature> features,
                                    std::span<const LookupOutput> outputs, const char* where,
                                    const char* outputs_name, StreamHandle stream) {
  ops::detail::validate_lookup_shape(where, features, outputs, outputs_name);
  ops.validate_lookup_data(where, features, stream);
}

}  // namespace

std::string to_string(PoolingMode mode) {
  switch (mode) {
    case PoolingMode::kSum:
      return "sum";
    case PoolingMode::kMean:
      return "mean";
    case PoolingMode::kNone:
      return "none";
  }
  return "unknown";
}

template <TableKey K>
size_t dedup(Backend backend, size_t n, const K* keys, K* unique_keys, uint32_t* inverse,
             uint32_t* counts, StreamHandle stream) {
  if (n == 0) return 0;
  require(keys != nullptr, "dedup", "keys", "nullptr", "must be non-null when n > 0");
  require(unique_keys != nullptr, "dedup", "unique_keys", "nullptr", "must be non-null when n > 0");
  require(inverse != nullptr, "dedup", "inverse", "nullptr", "must be non-null when n > 0");
  require(n <= 0xFFFFFFFFull, "dedup", "n", std::to_string(n), "must be < 2^32");
  return ops_backend(backend).dedup(n, keys, unique_keys, inverse, counts, stream);
}

void validate_lookup(Backend backend, std::span<const LookupFeature> features,
                     std::span<const LookupOutput> outputs, const char* where) {
  validate_lookup_shape_and_data(ops_backend(backend), features, outputs, where, "outputs",
                                 nullptr);
}

void pooled_lookup(Backend backend, std::span<const LookupFeature> features,
                   std::span<const LookupOutput> outputs, StreamHandle stream) {
  const OpsBackend& ops = ops_backend(backend);
  validate_lookup_shape_and_data(ops, features, outputs, "pooled_lookup", "outputs", stream);
  ops.pooled_lookup(features, outputs, stream);
}

void reduce_gradients(Backend backend, std::span<const LookupFeature> features,
                      std::span<const LookupOutput> grads, std::span<const LookupOutput> row_grads,
                      StreamHandle stream) {
  const OpsBackend& ops = ops_backend(backend);
  validate_lookup_shape_and_data(ops, features, grads, "reduce_gradients", "grads", stream);
  ops::detail::validate_lookup_shape("reduce_gradients", features, row_grads, "row_grads");
  for (size_t f = 0; f < row_grads.size(); ++f) {
    require(row_grads[f].type == ValueType::kFloat32, "reduce_gradients",
            ("row_grads[" + std::to_string(f) + "].type").c_str(), to_string(row_grads[f].type),
            "must be float32 (the reduced gradients are float32)");
  }
  ops.reduce_gradients(features, grads, row_grads, stream);
}

template size_t dedup<int64_t>(Backend, size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                               StreamHandle);
template size_t dedup<uint64_t>(Backend, size_t, const uint64_t*, uint64_t*, uint32_t*, uint32_t*,
                                StreamHandle);

}  // namespace dynemb

// The backend-neutral entry points of the ops part.
#include "dynemb/core/error.hpp"
#include "ops/backends.hpp"

namespace dynemb {
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
             uint32_t* counts, StreamHandle) {
  if (n == 0) return 0;
  require(keys != nullptr, "dedup", "keys", "nullptr", "must be non-null when n > 0");
  require(unique_keys != nullptr, "dedup", "unique_keys", "nullptr", "must be non-null when n > 0");
  require(inverse != nullptr, "dedup", "inverse", "nullptr", "must be non-null when n > 0");
  require(n <= 0xFFFFFFFFull, "dedup", "n", std::to_string(n), "must be < 2^32");
  detail::require_cpu_ops(backend, "dedup");
  return detail::dedup_cpu(n, keys, unique_keys, inverse, counts);
}

void validate_lookup(Backend backend, std::span<const LookupFeature> features,
                     std::span<const LookupOutput> outputs, const char* where) {
  detail::require_cpu_ops(backend, where);
  detail::validate_lookup_host(where, features, outputs, "outputs");
}

void pooled_lookup(Backend backend, std::span<const LookupFeature> features,
                   std::span<const LookupOutput> outputs, StreamHandle) {
  detail::require_cpu_ops(backend, "pooled_lookup");
  detail::validate_lookup_host("pooled_lookup", features, outputs, "outputs");
  detail::pooled_lookup_cpu(features, outputs);
}

void reduce_gradients(Backend backend, std::span<const LookupFeature> features,
                      std::span<const LookupOutput> grads, std::span<const LookupOutput> row_grads,
                      StreamHandle) {
  detail::require_cpu_ops(backend, "reduce_gradients");
  detail::validate_lookup_host("reduce_gradients", features, grads, "grads");
  detail::validate_lookup_host("reduce_gradients", features, row_grads, "row_grads");
  detail::reduce_gradients_cpu(features, grads, row_grads);
}

template size_t dedup<int64_t>(Backend, size_t, const int64_t*, int64_t*, uint32_t*, uint32_t*,
                               StreamHandle);
template size_t dedup<uint64_t>(Backend, size_t, const uint64_t*, uint64_t*, uint32_t*, uint32_t*,
                                StreamHandle);

}  // namespace dynemb

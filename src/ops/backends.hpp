// Each backend's implementation of the ops, called only by the dispatchers in src/ops/*.cpp.
#pragma once

#include <span>

#include "dynemb/ops/dedup.hpp"
#include "dynemb/ops/pooling.hpp"

namespace dynemb::detail {

template <TableKey K>
size_t dedup_cpu(size_t n, const K* keys, K* unique_keys, uint32_t* inverse, uint32_t* counts);

void pooled_lookup_cpu(std::span<const LookupFeature> features,
                       std::span<const LookupOutput> outputs);

void reduce_gradients_cpu(std::span<const LookupFeature> features,
                          std::span<const LookupOutput> grads,
                          std::span<const LookupOutput> row_grads);

// Checks every feature's shape, offsets and indices (host memory); throws InvalidArgument
// naming `where`, the feature, the argument, its value and its limit.
void validate_lookup_host(const char* where, std::span<const LookupFeature> features,
                          std::span<const LookupOutput> outputs, const char* outputs_name);

}  // namespace dynemb::detail

// The per-step state of the pooled-on-owner exchange (ShardedExchange::kPooledOnOwner).
#pragma once

#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/dist/sharded_collection.hpp"
#include "dynemb/ops/pooling.hpp"

namespace dynemb::dist {

template <TableKey K>
struct ShardedEmbeddingCollection<K>::PooledStep {
  // Requester: its bags (all tables) are rows [0, bags) of the output; owner o's partial of
  // bag p arrives at row o * bags + p of `partials`.
  size_t bags = 0;
  std::vector<size_t> bag_base;  // table t's bags start at bag_base[t]
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  // ids
  std::vector<uint64_t> matrix;  // received: [source][table] ids, bags (2 T per source) + status
  BackendBuffer<float> partials;
  BackendBuffer<uint32_t> sum_indices;  // bag p reads rows o * bags + p, o = 0 .. W-1
  BackendBuffer<int64_t> sum_offsets;   // p * W
  std::vector<LookupFeature> features;  // one per table: the sum of the partials
  std::vector<LookupOutput> outputs;
  // Owner: the bags of every source, regrouped table-major.
  size_t owner_bags = 0;
  std::vector<size_t> source_bags;        // bags received per source (all tables)
  BackendBuffer<uint32_t> partial_index;  // send position -> owner output row
  BackendBuffer<float> owner_out, send_partials, grads_in, owner_grads;
  BackendBuffer<K> owner_keys;
  BackendBuffer<float> owner_weights;
  BackendBuffer<int64_t> owner_offsets;
  BackendBuffer<uint32_t> iota;  // 0, 1, 2, ... (packing the output's gradient)
  BackendBuffer<float> packed_grad;
  bool owner_ran = false;
  bool pending_backward = false;
};

}  // namespace dynemb::dist

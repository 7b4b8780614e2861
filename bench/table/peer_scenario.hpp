// Times a CPU peer on the keys and batch the dynemb table was timed on.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/table/config.hpp"
#include "bench/table/peer_map.hpp"
#include "bench/table/results.hpp"
#include "bench/table/timed_batch.hpp"

namespace dynemb::bench {

// True for the operations the peers have (find, insert_or_assign, find_or_insert, assign,
// contains, erase, export = iterate).
bool peer_has_op(TableOp op);

// Fills `peer` with `stored`, then times each of config.ops the peers have on `batch` (best of
// config.repeats), restoring the stored set before each call. Export is counted as `capacity`
// pairs, like the dynemb export, so the two rates compare the time to copy out the same keys.
OpTimings run_peer_scenario(PeerMap& peer, const TableBenchConfig& config, uint32_t dim,
                            uint64_t capacity, const std::vector<uint64_t>& stored,
                            const TimedBatch& batch);

}  // namespace dynemb::bench

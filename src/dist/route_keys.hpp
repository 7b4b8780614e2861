// The sharded collection's key routing on the GPU (src/dist/cuda/route_keys.cu): which rank owns
// each unique key and the send order, and the owner's regrouping of what it received, without
// the keys visiting the host. Built with the CUDA backend; used for the hash and modulo routers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dynemb/core/stream.hpp"

namespace dynemb::dist::detail {

// The owner rules a kernel can evaluate (KeyRouter::hash(), KeyRouter::modulo()).
enum class DeviceRule : uint8_t { kHash, kModulo };

// unique_keys (device) holds table t's unique keys at [base[t], base[t + 1]) (base: host, T + 1
// entries). Writes, on `stream`: send_index[p] = the unique position sent p-th and send_keys[p]
// its key, in owner-major, then table, then unique order; and on the host counts[r * T + t] =
// the keys of table t that go to rank r (the stream is synchronized for it).
template <class K>
void route_unique_keys(const K* unique_keys, const std::vector<size_t>& base, uint32_t world,
                       DeviceRule rule, uint32_t* send_index, K* send_keys,
                       std::vector<uint64_t>& counts, StreamHandle stream);

// recv_keys (device, `received` keys) arrive source-major, then table: segment s = r * T + t
// holds src_start[s + 1] - src_start[s] keys of table t from rank r and goes, table-major, to
// dst_start[s]. Writes owner_keys[j] = the key and owner_index[j] = its received position, on
// `stream`. src_start has T * W + 1 entries, dst_start T * W (host).
template <class K>
void regroup_received_keys(const K* recv_keys, size_t received,
                           const std::vector<uint64_t>& src_start,
                           const std::vector<uint64_t>& dst_start, K* owner_keys,
                           uint32_t* owner_index, StreamHandle stream);

}  // namespace dynemb::dist::detail

// The distributed path: indices routed to the ranks owning their rows (a counting sort by
// owner, then one all-to-all of counts and one of indices), and rows moved through the
// communicator in its memory.
#pragma once

#include <cstdint>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/dist/communicator.hpp"
#include "dynemb/wholememory/partition.hpp"

namespace dynemb::wholememory {

// Indices of this rank sent to their owners, and what the others asked of this rank.
struct Route {
  std::vector<uint64_t> send_counts;   // per rank
  std::vector<uint64_t> recv_counts;   // per rank
  std::vector<int64_t> order;          // position (in the caller's indices) of the j-th item sent
  std::vector<int64_t> received_rows;  // local rows the others asked for, rank-major
  uint64_t sent() const { return order.size(); }
  uint64_t received() const { return received_rows.size(); }
};

// Collective. Throws InvalidArgument on every rank, before any data moves, when any rank passed
// an index outside [0, partition.rows) (`where` names the caller). `indices` is host memory.
Route route_indices(dist::Communicator& comm, const Partition& partition, const int64_t* indices,
                    size_t n, int device, const char* where);

// Collective: sends `row_bytes`-byte rows (send_counts[r] rows to rank r, rank-major, from
// `send` in `send_memory`) and returns what arrives (recv_counts[r] from rank r, rank-major) in
// `recv_memory` (on `device` when that is kCuda). Stages through the communicator's memory.
BackendBuffer<char> exchange_rows(dist::Communicator& comm, Backend send_memory, const void* send,
                                  const std::vector<uint64_t>& send_counts,
                                  const std::vector<uint64_t>& recv_counts, uint64_t row_bytes,
                                  Backend recv_memory, int device, StreamHandle stream);

// Copies `bytes` between buffers of the given memories (host copies are synchronous).
void move_bytes(Backend dst_memory, void* dst, Backend src_memory, const void* src, size_t bytes,
                int device, StreamHandle stream);

// A host copy of `n` values of `memory` (synchronizes `stream` first when it is device memory).
std::vector<int64_t> host_copy(const int64_t* values, size_t n, Backend memory, int device,
                               StreamHandle stream);

}  // namespace dynemb::wholememory

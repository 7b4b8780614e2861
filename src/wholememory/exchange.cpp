// Routing indices to their owners and moving rows through the communicator.
#include "exchange.hpp"

#include <algorithm>
#include <cstring>

#include "cuda_support.hpp"
#include "dynemb/core/error.hpp"

namespace dynemb::wholememory {

void move_bytes(Backend dst_memory, void* dst, Backend src_memory, const void* src, size_t bytes,
                int device, StreamHandle stream) {
  if (bytes == 0) return;
  if (dst_memory == Backend::kCpu && src_memory == Backend::kCpu) {
    std::memcpy(dst, src, bytes);
  } else if (dst_memory == Backend::kCpu) {
    sync_stream(stream, device);
    copy_from_backend(Backend::kCuda, dst, src, bytes);
  } else if (src_memory == Backend::kCpu) {
    sync_stream(stream, device);
    copy_to_backend(Backend::kCuda, dst, src, bytes);
  } else {
    copy_within_backend(Backend::kCuda, dst, src, bytes, stream);
  }
}

std::vector<int64_t> host_copy(const int64_t* values, size_t n, Backend memory, int device,
                               StreamHandle stream) {
  std::vector<int64_t> out(n);
  move_bytes(Backend::kCpu, out.data(), memory, values, n * sizeof(int64_t), device, stream);
  return out;
}

Route route_indices(dist::Communicator& comm, const Partition& partition, const int64_t* indices,
                    size_t n, int device, const char* where) {
  const uint32_t world = comm.world_size();
  std::string bad;
  for (size_t i = 0; i < n && bad.empty(); ++i) {
    if (indices[i] < 0 || static_cast<uint64_t>(indices[i]) >= partition.rows) {
      bad = "indices[" + std::to_string(i) + "] = " + std::to_string(indices[i]) +
            ", must be in [0, " + std::to_string(partition.rows) + ")";
    }
  }
  if (!dist::all_ranks_ok(comm, bad.empty())) {
    throw InvalidArgument(std::string(where) + ": " +
                          (bad.empty() ? "another rank passed an index out of range" : bad) +
                          " (rank " + std::to_string(comm.rank()) + "); nothing was copied");
  }
  Route route;
  route.send_counts.assign(world, 0);
  for (size_t i = 0; i < n; ++i) ++route.send_counts[partition.owner(indices[i])];
  // Counting sort by owner, stable: each owner gets its rows in the caller's order.
  std::vector<uint64_t> next(world, 0);
  for (uint32_t r = 1; r < world; ++r) next[r] = next[r - 1] + route.send_counts[r - 1];
  route.order.resize(n);
  std::vector<int64_t> local_rows(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t owner = partition.owner(indices[i]);
    const uint64_t j = next[owner]++;
    route.order[j] = static_cast<int64_t>(i);
    local_rows[j] = indices[i] - static_cast<int64_t>(partition.first_row(owner));
  }
  route.recv_counts = dist::all_to_all_counts(comm, route.send_counts);
  uint64_t received = 0;
  for (uint64_t c : route.recv_counts) received += c;
  route.received_rows.resize(received);
  BackendBuffer<char> rows =
      exchange_rows(comm, Backend::kCpu, local_rows.data(), route.send_counts, route.recv_counts,
                    sizeof(int64_t), Backend::kCpu, device, nullptr);
  std::memcpy(route.received_rows.data(), rows.data(), received * sizeof(int64_t));
  return route;
}

BackendBuffer<char> exchange_rows(dist::Communicator& comm, Backend send_memory, const void* send,
                                  const std::vector<uint64_t>& send_counts,
                                  const std::vector<uint64_t>& recv_counts, uint64_t row_bytes,
                                  Backend recv_memory, int device, StreamHandle stream) {
  const uint32_t world = comm.world_size();
  const Backend comm_memory = comm.backend();
  std::vector<size_t> sc(world), sd(world), rc(world), rd(world);
  size_t sent = 0;
  size_t received = 0;
  for (uint32_t r = 0; r < world; ++r) {
    sc[r] = send_counts[r] * row_bytes;
    sd[r] = sent;
    sent += sc[r];
    rc[r] = recv_counts[r] * row_bytes;
    rd[r] = received;
    received += rc[r];
  }
  // A CUDA communicator's buffers live on its device.
  const int comm_device = comm_memory == Backend::kCuda ? comm.device() : std::max(device, 0);
  BackendBuffer<char> staged_send;
  const void* send_ptr = send;
  if (send_memory != comm_memory) {
    staged_send = BackendBuffer<char>(comm_memory, sent, comm_device);
    move_bytes(comm_memory, staged_send.data(), send_memory, send, sent, comm_device, stream);
    send_ptr = staged_send.data();
  }
  BackendBuffer<char> recv(comm_memory, received, comm_device);
  if (comm_memory == Backend::kCuda) sync_stream(stream, comm_device);
  comm.all_to_all_v(send_ptr, sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                    dist::DataType::kUint8, comm_memory == Backend::kCuda ? stream : nullptr);
  if (recv_memory == comm_memory) return recv;
  BackendBuffer<char> out(recv_memory, received, comm_device);
  move_bytes(recv_memory, out.data(), comm_memory, recv.data(), received, comm_device, stream);
  return out;
}

}  // namespace dynemb::wholememory

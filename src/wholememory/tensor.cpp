// WholeTensor and the gather / scatter of its rows.
#include "dynemb/wholememory/tensor.hpp"

#include "cuda_support.hpp"
#include "dynemb/core/error.hpp"
#include "exchange.hpp"
#include "row_copy.hpp"

namespace dynemb::wholememory {
namespace {

MemoryOptions memory_options(const TensorOptions& o) {
  constexpr const char* kWhere = "wholememory::WholeTensor";
  require(o.shape.size() == 1 || o.shape.size() == 2, kWhere, "shape.size()",
          std::to_string(o.shape.size()), "must be 1 or 2");
  for (size_t d = 0; d < o.shape.size(); ++d) {
    require(o.shape[d] > 0, kWhere, ("shape[" + std::to_string(d) + "]").c_str(),
            std::to_string(o.shape[d]), "must be > 0");
  }
  MemoryOptions m;
  m.type = o.type;
  m.location = o.location;
  m.entry_bytes = (o.shape.size() == 2 ? o.shape[1] : 1) * dist::data_type_bytes(o.dtype);
  m.size_bytes = o.shape[0] * m.entry_bytes;
  m.device = o.device;
  m.register_host_with_cuda = o.register_host_with_cuda;
  return m;
}

// The byte range of a row the columns name; InvalidArgument when outside the row.
RowSpace row_space(const WholeTensor& t, Columns columns, const char* where) {
  const uint64_t count =
      columns.count == 0 ? t.cols() - std::min(columns.first, t.cols()) : columns.count;
  require(columns.first < t.cols() && count > 0 && columns.first + count <= t.cols(), where,
          "columns",
          "[" + std::to_string(columns.first) + ", " + std::to_string(columns.first + count) + ")",
          "must be a non-empty range inside [0, " + std::to_string(t.cols()) + ")");
  RowSpace s;
  s.part_count = t.memory().partition().world;
  s.rows_per_part = t.memory().partition().rows_per_rank;
  s.entry_bytes = t.row_bytes();
  s.offset_bytes = columns.first * t.element_bytes();
  s.copy_bytes = count * t.element_bytes();
  return s;
}

void require_executor(const WholeMemory& m, Executor executor, const char* where) {
  if (executor == Backend::kCpu && m.location() != MemoryLocation::kHost) {
    throw InvalidArgument(std::string(where) + ": executor = cpu, but the memory is " +
                          to_string(m.location()) + " memory; use executor = cuda");
  }
  if (executor == Backend::kCuda && !m.cuda_accessible()) {
    throw NotAvailable(std::string(where) + ": executor = cuda, but this " + m.describe() +
                       " is not addressable by CUDA (no device, or host memory not registered)");
  }
}

// Checks the indices of a local (continuous / chunked) copy.
void check_indices(const WholeTensor& t, const int64_t* indices, size_t n, Executor executor,
                   StreamHandle stream, const char* where) {
  if (n == 0) return;
  if (executor == Backend::kCuda) {
    const uint64_t bad = count_bad_indices_cuda(indices, n, t.rows(), t.memory().device(), stream);
    require(bad == 0, where, "indices", std::to_string(bad) + " of " + std::to_string(n),
            "every index must be in [0, " + std::to_string(t.rows()) + "); nothing was copied");
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    require(indices[i] >= 0 && static_cast<uint64_t>(indices[i]) < t.rows(), where,
            ("indices[" + std::to_string(i) + "]").c_str(), std::to_string(indices[i]),
            "must be in [0, " + std::to_string(t.rows()) + "); nothing was copied");
  }
}

void copy_local(const RowSpace& space, const int64_t* indices, size_t n, char* buffer,
                uint64_t stride, bool gather, Executor executor, int device, StreamHandle stream) {
  if (n == 0) return;
  if (executor == Backend::kCpu) {
    copy_rows_cpu(space, indices, n, buffer, stride, gather);
  } else {
    copy_rows_cuda(space, indices, n, buffer, stride, gather, device, stream);
  }
}

// Where the local part is read and written on the distributed path: host threads for host
// memory, the device for device memory.
Executor local_executor(const WholeMemory& m) {
  return m.location() == MemoryLocation::kHost ? Backend::kCpu : Backend::kCuda;
}

// A RowSpace over the local part only, indexed by local row.
RowSpace local_space(RowSpace space, const WholeMemory& m, char* const* local_part) {
  space.parts = local_part;
  space.part_count = 1;
  space.rows_per_part = std::max<uint64_t>(1, m.partition().rows_of(m.rank()));
  return space;
}

// A RowSpace over a dense buffer of `row_bytes` rows, indexed by position.
RowSpace dense_space(char* const* buffer, uint64_t rows, uint64_t row_bytes) {
  RowSpace s;
  s.parts = buffer;
  s.part_count = 1;
  s.rows_per_part = std::max<uint64_t>(1, rows);
  s.entry_bytes = row_bytes;
  s.copy_bytes = row_bytes;
  return s;
}

// Index arrays of the distributed path, in the memory of their executor.
BackendBuffer<int64_t> upload_indices(const std::vector<int64_t>& host, Executor executor,
                                      int device) {
  BackendBuffer<int64_t> out(executor, host.size(), device);
  move_bytes(executor, out.data(), Backend::kCpu, host.data(), host.size() * sizeof(int64_t),
             device, nullptr);
  return out;
}

void distributed_gather(const WholeTensor& t, const RowSpace& space, const int64_t* indices,
                        size_t n, char* out, Executor executor, StreamHandle stream) {
  const WholeMemory& m = t.memory();
  const int device = m.device();
  const std::vector<int64_t> host_indices = host_copy(indices, n, executor, device, stream);
  const Route route = route_indices(m.communicator(), m.partition(), host_indices.data(), n, device,
                                    "wholememory::gather");
  // The owner copies the asked rows out of its part, in the order asked.
  const Executor local = local_executor(m);
  const uint64_t row = space.copy_bytes;
  BackendBuffer<char> asked(local, route.received() * row, device);
  BackendBuffer<int64_t> asked_rows = upload_indices(route.received_rows, local, device);
  char* const local_part[1] = {static_cast<char*>(m.local_data())};
  copy_local(local_space(space, m, local_part), asked_rows.data(), route.received(), asked.data(),
             row, true, local, device, stream);
  // Rows go back; each lands at its position in the caller's order.
  BackendBuffer<char> answers =
      exchange_rows(m.communicator(), local, asked.data(), route.recv_counts, route.send_counts,
                    row, executor, device, stream);
  BackendBuffer<int64_t> order = upload_indices(route.order, executor, device);
  char* const out_part[1] = {out};
  copy_local(dense_space(out_part, n, row), order.data(), n, answers.data(), row, false, executor,
             device, stream);
}

void distributed_scatter(WholeTensor& t, const RowSpace& space, const char* in,
                         const int64_t* indices, size_t n, Executor executor, StreamHandle stream) {
  const WholeMemory& m = t.memory();
  const int device = m.device();
  const std::vector<int64_t> host_indices = host_copy(indices, n, executor, device, stream);
  const Route route = route_indices(m.communicator(), m.partition(), host_indices.data(), n, device,
                                    "wholememory::scatter");
  const uint64_t row = space.copy_bytes;
  // The rows in send order.
  BackendBuffer<int64_t> order = upload_indices(route.order, executor, device);
  BackendBuffer<char> sending(executor, n * row, device);
  char* const in_part[1] = {const_cast<char*>(in)};
  copy_local(dense_space(in_part, n, row), order.data(), n, sending.data(), row, true, executor,
             device, stream);
  const Executor local = local_executor(m);
  BackendBuffer<char> arrived =
      exchange_rows(m.communicator(), executor, sending.data(), route.send_counts,
                    route.recv_counts, row, local, device, stream);
  BackendBuffer<int64_t> arrived_rows = upload_indices(route.received_rows, local, device);
  char* const local_part[1] = {static_cast<char*>(m.local_data())};
  copy_local(local_space(space, m, local_part), arrived_rows.data(), route.received(),
             arrived.data(), row, false, local, device, stream);
  if (local == Backend::kCuda) sync_stream(stream, device);
}

}  // namespace

WholeTensor::WholeTensor(dist::Communicator& comm, const TensorOptions& options)
    : dtype_(options.dtype), shape_(options.shape) {
  memory_ = create_whole_memory(comm, memory_options(options));
}

void gather(const WholeTensor& tensor, const int64_t* indices, size_t n, void* out,
            Executor executor, StreamHandle stream, Columns columns) {
  constexpr const char* kWhere = "wholememory::gather";
  const WholeMemory& m = tensor.memory();
  RowSpace space = row_space(tensor, columns, kWhere);
  require_executor(m, executor, kWhere);
  if (m.type() == MemoryType::kDistributed) {
    distributed_gather(tensor, space, indices, n, static_cast<char*>(out), executor, stream);
    return;
  }
  check_indices(tensor, indices, n, executor, stream, kWhere);
  space.parts = reinterpret_cast<char* const*>(m.parts().data());
  copy_local(space, indices, n, static_cast<char*>(out), space.copy_bytes, true, executor,
             m.device(), stream);
}

void scatter(WholeTensor& tensor, const void* in, const int64_t* indices, size_t n,
             Executor executor, StreamHandle stream, Columns columns) {
  constexpr const char* kWhere = "wholememory::scatter";
  const WholeMemory& m = tensor.memory();
  RowSpace space = row_space(tensor, columns, kWhere);
  require_executor(m, executor, kWhere);
  if (m.type() == MemoryType::kDistributed) {
    distributed_scatter(tensor, space, static_cast<const char*>(in), indices, n, executor, stream);
    return;
  }
  check_indices(tensor, indices, n, executor, stream, kWhere);
  space.parts = reinterpret_cast<char* const*>(m.parts().data());
  copy_local(space, indices, n, const_cast<char*>(static_cast<const char*>(in)), space.copy_bytes,
             false, executor, m.device(), stream);
}

}  // namespace dynemb::wholememory

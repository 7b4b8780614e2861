// Collectives between the ranks of a job: all-to-all with variable counts, all-gather,
// all-reduce (sum), broadcast, barrier. One interface; MPI (host buffers), NCCL (device buffers,
// CUDA streams) and a one-rank communicator implement it (docs/dist.md).
//
// Ordering rule: every rank issues the same collectives in the same order with matching sizes.
// The code of this part keeps it: each call sequence is decided from values every rank shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dynemb/core/memory.hpp"
#include "dynemb/core/options.hpp"
#include "dynemb/core/stream.hpp"

namespace dynemb::dist {

// Element types the collectives move.
enum class DataType : uint8_t { kUint8, kInt32, kUint32, kInt64, kUint64, kFloat32, kFloat64 };

// Bytes of one element.
size_t data_type_bytes(DataType type);
// "uint8", "int32", ...
std::string to_string(DataType type);

// The DataType of a C++ element type.
template <class T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<uint8_t>() {
  return DataType::kUint8;
}
template <>
constexpr DataType data_type_of<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType data_type_of<uint32_t>() {
  return DataType::kUint32;
}
template <>
constexpr DataType data_type_of<int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType data_type_of<uint64_t>() {
  return DataType::kUint64;
}
template <>
constexpr DataType data_type_of<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType data_type_of<double>() {
  return DataType::kFloat64;
}

// A group of ranks that exchange data. Buffers live in backend()'s memory (host for CPU,
// device for CUDA); counts and displacements are host arrays of world_size() entries, in
// elements. Calls are ordered on `stream` (CUDA) and return when the data may be read there;
// the CPU implementations return when the data has arrived.
class Communicator {
 public:
  virtual ~Communicator() = default;

  // This process's rank in [0, world_size()).
  virtual uint32_t rank() const = 0;
  // Number of ranks.
  virtual uint32_t world_size() const = 0;
  // The memory the buffers must be in.
  virtual Backend backend() const = 0;
  // "mpi", "nccl", "local".
  virtual std::string name() const = 0;
  // The CUDA device its buffers live on when backend() is CUDA (0 unless the communicator
  // says otherwise); a sharded collection's tables must be on it.
  virtual int device() const { return 0; }

  // Sends send_counts[r] elements from send + send_displs[r] to rank r and receives
  // recv_counts[r] elements from rank r into recv + recv_displs[r]. recv_counts[r] must equal
  // what rank r sends here (exchange the counts first).
  virtual void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs,
                            void* recv, const size_t* recv_counts, const size_t* recv_displs,
                            DataType type, StreamHandle stream = nullptr) = 0;
  // recv (world_size() * count elements) gets rank r's `count` elements at r * count.
  virtual void all_gather(const void* send, void* recv, size_t count, DataType type,
                          StreamHandle stream = nullptr) = 0;
  // recv[i] = the sum over ranks of send[i] (send == recv allowed).
  virtual void all_reduce_sum(const void* send, void* recv, size_t count, DataType type,
                              StreamHandle stream = nullptr) = 0;
  // Every rank's buffer gets root's `count` elements.
  virtual void broadcast(void* buffer, size_t count, DataType type, uint32_t root,
                         StreamHandle stream = nullptr) = 0;
  // Returns once every rank has called it (host-synchronous).
  virtual void barrier() = 0;
};

// A communicator of one rank (world size 1) on `backend`: each collective copies send to recv.
// Lets single-process code and tests run the distributed code path.
std::unique_ptr<Communicator> make_local_communicator(Backend backend = Backend::kCpu);

// --- host-side helpers (control messages; stage through backend memory, synchronize) ---------

// Every rank's `values` (the same count on every rank), rank-major.
template <class T>
std::vector<T> all_gather_values(Communicator& comm, std::span<const T> values);

// Element-wise sum over the ranks.
template <class T>
std::vector<T> all_reduce_values(Communicator& comm, std::span<const T> values);

// out[r] = what rank r put in counts[this rank]; counts has world_size() entries per rank.
std::vector<uint64_t> all_to_all_counts(Communicator& comm, std::span<const uint64_t> counts,
                                        size_t per_rank = 1);

// Every rank's byte string (lengths may differ), rank-major.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

// Root's string on every rank.
std::string broadcast_string(Communicator& comm, const std::string& value, uint32_t root = 0);

// Throws InvalidArgument on every rank, naming `what`, the ranks and their descriptions, when
// the descriptions differ between ranks (one all-gather of a hash, a second only on mismatch).
void require_same_on_all_ranks(Communicator& comm, const std::string& description,
                               const std::string& what);

// Agreement on an outcome: true on every rank when `ok` is true on every rank.
bool all_ranks_ok(Communicator& comm, bool ok);

}  // namespace dynemb::dist

// WholeMemory: memory of a given size spread over the processes of one node (one process per
// GPU), each rank holding one part, every part reachable from every rank by its type
// (docs/wholememory.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dynemb/dist/communicator.hpp"
#include "dynemb/wholememory/partition.hpp"

namespace dynemb::wholememory {

// How the parts are reached.
enum class MemoryType : uint8_t {
  kContinuous,   // every part mapped into one virtual range on every rank
  kChunked,      // every part mapped on every rank, a pointer per part
  kDistributed,  // only the local part is mapped; other parts through the communicator
};

// Where the parts live.
enum class MemoryLocation : uint8_t {
  kHost,    // POSIX shared memory (registered with CUDA where a device is present)
  kDevice,  // the rank's GPU memory
};

// "continuous", "chunked", "distributed".
std::string to_string(MemoryType type);
// "host", "device".
std::string to_string(MemoryLocation location);
// Parses the names above (InvalidArgument otherwise).
MemoryType parse_memory_type(const std::string& name);
MemoryLocation parse_memory_location(const std::string& name);

// What to create.
struct MemoryOptions {
  MemoryType type = MemoryType::kContinuous;
  MemoryLocation location = MemoryLocation::kHost;
  uint64_t size_bytes = 0;   // > 0, a multiple of entry_bytes
  uint64_t entry_bytes = 0;  // a row: the unit of the partition, > 0
  // The rank's CUDA device; -1: rank % device count. Unused by host memory without CUDA.
  int device = -1;
  // Host memory: register it with CUDA (mapped, so kernels read it) when a device is present.
  bool register_host_with_cuda = true;
};

// Memory shared by the ranks of `communicator()`. Creating and destroying it are collective
// (every rank, the same options); the communicator must outlive it.
class WholeMemory {
 public:
  virtual ~WholeMemory() = default;
  WholeMemory(const WholeMemory&) = delete;
  WholeMemory& operator=(const WholeMemory&) = delete;

  MemoryType type() const { return type_; }
  MemoryLocation location() const { return location_; }
  const Partition& partition() const { return partition_; }
  dist::Communicator& communicator() const { return *comm_; }
  uint32_t rank() const { return comm_->rank(); }
  // The rank's CUDA device, or -1 (host memory without CUDA).
  int device() const { return device_; }
  // True when CUDA kernels on device() can address the parts this rank maps (device memory, or
  // host memory registered with CUDA).
  bool cuda_accessible() const { return cuda_accessible_; }

  // This rank's part (partition().bytes_of(rank()) bytes; nullptr when it holds no row).
  void* local_data() const { return parts_[comm_->rank()]; }
  uint64_t local_bytes() const { return partition_.bytes_of(comm_->rank()); }
  uint64_t local_first_row() const { return partition_.first_row(comm_->rank()); }
  // Rank r's part as this process addresses it (continuous and chunked; StateError for
  // distributed, whose other parts are not mapped).
  void* part_data(uint32_t rank) const;
  // Every part's address (distributed: nullptr but the local one).
  const std::vector<void*>& parts() const { return parts_; }
  // The whole memory as one range (continuous only; StateError otherwise).
  void* data() const;
  // "continuous host memory: rows=..., ...".
  std::string describe() const;
  // Waits for the work queued on device()'s default stream (gathers and scatters ordered there);
  // a no-op without a device. Needed before reading results from another device's context.
  void synchronize() const;

 protected:
  WholeMemory(dist::Communicator& comm, const MemoryOptions& options, const Partition& partition)
      : comm_(&comm), type_(options.type), location_(options.location), partition_(partition) {}

  dist::Communicator* comm_;
  MemoryType type_;
  MemoryLocation location_;
  Partition partition_;
  int device_ = -1;
  bool cuda_accessible_ = false;
  std::vector<void*> parts_;  // parts_[r]: rank r's part here (nullptr: not mapped / empty)
  void* base_ = nullptr;      // continuous: the whole range
};

// Creates the memory collectively: every rank of `comm` calls it with the same options (checked:
// InvalidArgument naming the ranks that differ). Throws InvalidArgument on bad sizes,
// NotAvailable where the type or location cannot be built here (no CUDA, no VMM, no IPC, peer
// access missing, ranks on different nodes), each naming what is missing; every rank throws.
std::unique_ptr<WholeMemory> create_whole_memory(dist::Communicator& comm,
                                                 const MemoryOptions& options);

}  // namespace dynemb::wholememory

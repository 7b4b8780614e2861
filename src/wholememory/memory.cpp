// WholeMemory's common accessors and the collective factory.
#include "dynemb/wholememory/memory.hpp"

#include "cuda_support.hpp"
#include "dynemb/core/error.hpp"
#include "host_memory.hpp"

namespace dynemb::wholememory {

std::string to_string(MemoryType type) {
  switch (type) {
    case MemoryType::kContinuous:
      return "continuous";
    case MemoryType::kChunked:
      return "chunked";
    case MemoryType::kDistributed:
      return "distributed";
  }
  return "unknown";
}

std::string to_string(MemoryLocation location) {
  return location == MemoryLocation::kHost ? "host" : "device";
}

MemoryType parse_memory_type(const std::string& name) {
  for (MemoryType t : {MemoryType::kContinuous, MemoryType::kChunked, MemoryType::kDistributed}) {
    if (to_string(t) == name) return t;
  }
  throw InvalidArgument("wholememory: memory type = \"" + name +
                        "\", must be continuous, chunked or distributed");
}

MemoryLocation parse_memory_location(const std::string& name) {
  if (name == "host") return MemoryLocation::kHost;
  if (name == "device") return MemoryLocation::kDevice;
  throw InvalidArgument("wholememory: memory location = \"" + name + "\", must be host or device");
}

void* WholeMemory::part_data(uint32_t rank) const {
  require(rank < parts_.size(), "WholeMemory::part_data", "rank", std::to_string(rank),
          "must be < world size " + std::to_string(parts_.size()));
  if (type_ == MemoryType::kDistributed) {
    throw StateError("WholeMemory::part_data: distributed memory maps only the local part (rank " +
                     std::to_string(comm_->rank()) + "); rank " + std::to_string(rank) +
                     "'s part is reached through gather / scatter");
  }
  return parts_[rank];
}

void* WholeMemory::data() const {
  if (type_ != MemoryType::kContinuous) {
    throw StateError("WholeMemory::data: only continuous memory is one range; this one is " +
                     to_string(type_));
  }
  return base_;
}

std::string WholeMemory::describe() const {
  return to_string(type_) + " " + to_string(location_) + " memory: " + partition_.describe() +
         (device_ >= 0 ? ", device " + std::to_string(device_) : "");
}

void WholeMemory::synchronize() const {
  if (device_ >= 0) sync_stream(nullptr, device_);
}

std::unique_ptr<WholeMemory> create_whole_memory(dist::Communicator& comm,
                                                 const MemoryOptions& options) {
  // Validate locally first (same answer on every rank when the options agree).
  constexpr const char* kWhere = "wholememory::create_whole_memory";
  (void)make_partition(options.size_bytes, options.entry_bytes, comm.world_size());
  require(options.device >= -1, kWhere, "device", std::to_string(options.device),
          "must be >= 0, or -1 for rank % device count");
  dist::require_same_on_all_ranks(comm,
                                  to_string(options.type) + " " + to_string(options.location) +
                                      " size " + std::to_string(options.size_bytes) + " entry " +
                                      std::to_string(options.entry_bytes) + " register " +
                                      std::to_string(options.register_host_with_cuda),
                                  "wholememory memory options");
  if (options.location == MemoryLocation::kHost) return create_host_memory(comm, options);
  return create_device_memory(comm, options);
}

}  // namespace dynemb::wholememory

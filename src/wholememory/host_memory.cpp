// Host-location WholeMemory over memfd shared memory.
#include "host_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cuda_support.hpp"
#include "dynemb/core/error.hpp"
#include "node_ipc.hpp"

namespace dynemb::wholememory {
namespace {

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string errno_text(const std::string& call) {
  return call + ": " + std::strerror(errno);
}

class HostMemory final : public WholeMemory {
 public:
  HostMemory(dist::Communicator& comm, const MemoryOptions& options, const Partition& partition)
      : WholeMemory(comm, options, partition) {
    parts_.assign(comm.world_size(), nullptr);
    mapped_.assign(comm.world_size(), 0);
    device_ = options.register_host_with_cuda ? pick_device(options.device, comm.rank()) : -1;
    try {
      if (type_ == MemoryType::kDistributed) {
        map_local_only();
      } else {
        map_shared();
      }
      register_with_cuda();
    } catch (...) {
      release();
      throw;
    }
  }

  ~HostMemory() override { release(); }

 private:
  void release() noexcept {
    for (void* ptr : registered_) unregister_host_memory(ptr);
    registered_.clear();
    if (base_ != nullptr) {
      ::munmap(base_, reserved_);
    } else {
      for (size_t r = 0; r < parts_.size(); ++r) {
        if (parts_[r] != nullptr) ::munmap(parts_[r], mapped_[r]);
      }
    }
    base_ = nullptr;
    parts_.assign(parts_.size(), nullptr);
  }

  void map_local_only() {
    const uint32_t rank = comm_->rank();
    const uint64_t bytes = round_up(partition_.bytes_of(rank), host_page_bytes());
    std::string failure;
    if (bytes > 0) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        failure = errno_text("mmap of " + std::to_string(bytes) + " bytes");
      } else {
        parts_[rank] = p;
        mapped_[rank] = bytes;
      }
    }
    if (!dist::all_ranks_ok(*comm_, failure.empty())) {
      throw OutOfMemory("wholememory: distributed host memory: " +
                        (failure.empty() ? std::string("another rank failed") : failure));
    }
  }

  void map_shared() {
    require_one_node(*comm_, "wholememory: " + to_string(type_) + " host memory");
    const uint32_t rank = comm_->rank();
    const uint32_t world = comm_->world_size();
    const uint64_t page = host_page_bytes();
    std::string failure;
    // This rank's part: a memfd of whole pages.
    int fd = -1;
    const uint64_t mine = round_up(partition_.bytes_of(rank), page);
    if (mine > 0) {
      fd = ::memfd_create("dynemb-wholememory", MFD_CLOEXEC);
      if (fd < 0) {
        failure = errno_text("memfd_create");
      } else if (::ftruncate(fd, static_cast<off_t>(mine)) != 0) {
        failure = errno_text("ftruncate to " + std::to_string(mine) + " bytes");
      }
    }
    if (!dist::all_ranks_ok(*comm_, failure.empty())) {
      if (fd >= 0) ::close(fd);
      throw OutOfMemory("wholememory: host shared memory: " +
                        (failure.empty() ? std::string("another rank failed") : failure));
    }
    std::vector<int> fds;
    try {
      fds = exchange_fds(*comm_, fd, "wholememory: host shared memory");
    } catch (...) {
      if (fd >= 0) ::close(fd);
      throw;
    }
    if (fd >= 0) ::close(fd);

    if (type_ == MemoryType::kContinuous) {
      // One reserved range; every part mapped at its offset (each but the last is whole pages).
      reserved_ = round_up(partition_.total_bytes(), page);
      void* base =
          ::mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) {
        failure = errno_text("reserving " + std::to_string(reserved_) + " bytes of address space");
      } else {
        base_ = base;
      }
    }
    for (uint32_t r = 0; r < world && failure.empty(); ++r) {
      const uint64_t bytes = round_up(partition_.bytes_of(r), page);
      if (bytes == 0) continue;
      if (fds[r] < 0) {
        failure = "rank " + std::to_string(r) + "'s part did not arrive";
        break;
      }
      char* at = base_ != nullptr ? static_cast<char*>(base_) + partition_.offset_of(r) : nullptr;
      void* p = ::mmap(at, bytes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | (at != nullptr ? MAP_FIXED : 0), fds[r], 0);
      if (p == MAP_FAILED) {
        failure = errno_text("mmap of rank " + std::to_string(r) + "'s part");
        break;
      }
      parts_[r] = p;
      mapped_[r] = bytes;
    }
    close_fds(fds);
    if (!dist::all_ranks_ok(*comm_, failure.empty())) {
      throw OutOfMemory("wholememory: mapping host shared memory: " +
                        (failure.empty() ? std::string("another rank failed") : failure));
    }
  }

  // Registers what this rank maps, so kernels on device_ address it.
  void register_with_cuda() {
    if (device_ < 0) return;
    std::string failure;
    try {
      if (base_ != nullptr) {
        register_host_memory(base_, reserved_, device_);
        registered_.push_back(base_);
      } else {
        for (size_t r = 0; r < parts_.size(); ++r) {
          if (parts_[r] == nullptr) continue;
          register_host_memory(parts_[r], mapped_[r], device_);
          registered_.push_back(parts_[r]);
        }
      }
    } catch (const Error& e) {
      failure = e.what();
    }
    cuda_accessible_ = dist::all_ranks_ok(*comm_, failure.empty());
    if (!cuda_accessible_) {
      for (void* ptr : registered_) unregister_host_memory(ptr);
      registered_.clear();
      throw CudaError("wholememory: registering host memory with CUDA: " +
                      (failure.empty() ? std::string("failed on another rank") : failure) +
                      " (pass register_host_with_cuda = false to use it from the CPU only)");
    }
  }

  std::vector<uint64_t> mapped_;   // bytes mapped at parts_[r] (chunked, distributed)
  uint64_t reserved_ = 0;          // continuous: bytes of the reserved range
  std::vector<void*> registered_;  // ranges registered with CUDA
};

}  // namespace

uint64_t host_page_bytes() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

std::unique_ptr<WholeMemory> create_host_memory(dist::Communicator& comm,
                                                const MemoryOptions& options) {
  const uint64_t granularity = options.type == MemoryType::kContinuous ? host_page_bytes() : 1;
  const Partition partition =
      make_partition(options.size_bytes, options.entry_bytes, comm.world_size(), granularity);
  return std::make_unique<HostMemory>(comm, options, partition);
}

}  // namespace dynemb::wholememory

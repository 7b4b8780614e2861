// Device-location WholeMemory: continuous through CUDA virtual memory management (each rank's
// part a cuMemCreate allocation exported as a POSIX file descriptor, passed over a Unix socket
// and mapped into one reserved range), chunked through CUDA IPC handles, distributed as a plain
// allocation of the local part.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cuda/driver_api.hpp"
#include "cuda_support.hpp"
#include "dynemb/core/cuda/check.hpp"
#include "dynemb/core/cuda/device_guard.hpp"
#include "dynemb/core/error.hpp"
#include "node_ipc.hpp"

namespace dynemb::wholememory {
namespace {

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Runs `step` on this rank and throws on every rank if it failed on any (naming this rank's
// failure, or saying another rank failed): NotAvailable when any rank's failure was one,
// CudaError otherwise.
template <class Step>
void on_every_rank(dist::Communicator& comm, const std::string& what, Step&& step) {
  std::string failure;
  bool not_available = false;
  try {
    step();
  } catch (const NotAvailable& e) {
    failure = e.what();
    not_available = true;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const uint64_t flags[2] = {failure.empty() ? 0u : 1u, not_available ? 1u : 0u};
  const std::vector<uint64_t> sum = dist::all_reduce_values<uint64_t>(comm, {flags, 2});
  if (sum[0] == 0) return;
  const std::string message = what + ": " + (failure.empty() ? "failed on another rank" : failure) +
                              " (rank " + std::to_string(comm.rank()) + ")";
  if (sum[1] != 0) throw NotAvailable(message);
  throw CudaError(message);
}

// The device's UUID as text.
std::string device_uuid(int device) {
  cudaDeviceProp prop{};
  core::cuda::check(cudaGetDeviceProperties(&prop, device), "wholememory: cudaGetDeviceProperties");
  return std::string(prop.uuid.bytes, sizeof(prop.uuid.bytes));
}

// Checks that this rank's device reaches every other rank's (the same GPU, or peer access);
// NotAvailable names the ranks and devices otherwise. Enables peer access where needed.
void require_peer_access(dist::Communicator& comm, int device, const std::string& what) {
  const std::vector<std::string> uuids = dist::all_gather_strings(comm, device_uuid(device));
  on_every_rank(comm, what + ": peer access", [&] {
    const int count = cuda_device_count();
    for (uint32_t r = 0; r < uuids.size(); ++r) {
      if (uuids[r] == uuids[comm.rank()]) continue;
      int peer = -1;
      for (int d = 0; d < count && peer < 0; ++d) {
        if (device_uuid(d) == uuids[r]) peer = d;
      }
      if (peer < 0) {
        throw NotAvailable("rank " + std::to_string(r) + "'s GPU is not visible to rank " +
                           std::to_string(comm.rank()) +
                           " (CUDA_VISIBLE_DEVICES must show every GPU of the node)");
      }
      int can = 0;
      core::cuda::check(cudaDeviceCanAccessPeer(&can, device, peer),
                        "wholememory: cudaDeviceCanAccessPeer");
      if (can == 0) {
        throw NotAvailable("peer access missing: device " + std::to_string(device) +
                           " cannot access device " + std::to_string(peer) + " (rank " +
                           std::to_string(r) + "'s); use distributed memory");
      }
      const core::cuda::DeviceGuard on(device);
      const cudaError_t enabled = cudaDeviceEnablePeerAccess(peer, 0);
      if (enabled == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
      else
        core::cuda::check(enabled, "wholememory: cudaDeviceEnablePeerAccess");
    }
  });
}

// --- continuous: CUDA VMM ----------------------------------------------------------------------

class VmmMemory final : public WholeMemory {
 public:
  VmmMemory(dist::Communicator& comm, const MemoryOptions& options, int device)
      : WholeMemory(comm, options, Partition{}) {
    device_ = device;
    const core::cuda::DeviceGuard on(device_);
    const std::string what = "wholememory: continuous device memory (CUDA VMM)";
    core::cuda::check(cudaFree(nullptr), "wholememory: initializing the CUDA context");
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    uint64_t granularity = 0;
    on_every_rank(comm, what, [&] {
      const DriverApi& cu = driver_api();
      CUdevice dev = 0;
      check_cu(cu.device_get(&dev, device_), "cuDeviceGet");
      int vmm = 0;
      int fd_handles = 0;
      check_cu(cu.device_get_attribute(
                   &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
               "cuDeviceGetAttribute");
      check_cu(
          cu.device_get_attribute(
              &fd_handles, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev),
          "cuDeviceGetAttribute");
      if (vmm == 0)
        throw NotAvailable("device " + std::to_string(device_) +
                           " has no virtual memory management");
      if (fd_handles == 0) {
        throw NotAvailable("device " + std::to_string(device_) +
                           " cannot export memory as POSIX file descriptors");
      }
      size_t g = 0;
      check_cu(cu.mem_get_allocation_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
               "cuMemGetAllocationGranularity");
      granularity = g;
    });
    require_one_node(comm, what);
    require_peer_access(comm, device_, what);
    // Every rank's parts in whole granules of the largest granularity.
    const std::vector<uint64_t> all = dist::all_gather_values<uint64_t>(comm, {&granularity, 1});
    granularity = *std::max_element(all.begin(), all.end());
    partition_ =
        make_partition(options.size_bytes, options.entry_bytes, comm.world_size(), granularity);
    parts_.assign(comm.world_size(), nullptr);
    handles_.assign(comm.world_size(), 0);
    try {
      build(prop, granularity, what);
    } catch (...) {
      release();
      throw;
    }
    cuda_accessible_ = true;
  }

  ~VmmMemory() override { release(); }

 private:
  void build(const CUmemAllocationProp& prop, uint64_t granularity, const std::string& what) {
    const DriverApi& cu = driver_api();
    dist::Communicator& comm = *comm_;
    const uint32_t rank = comm.rank();
    int fd = -1;
    on_every_rank(comm, what + ": cuMemCreate", [&] {
      const uint64_t mine = round_up(partition_.bytes_of(rank), granularity);
      if (mine == 0) return;
      check_cu(
          cu.mem_create(&handles_[rank], mine, &prop, 0),
          "cuMemCreate of " + std::to_string(mine) + " bytes on device " + std::to_string(device_));
      check_cu(cu.mem_export_to_shareable_handle(&fd, handles_[rank],
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle");
    });
    std::vector<int> fds;
    try {
      fds = exchange_fds(comm, fd, what);
    } catch (...) {
      if (fd >= 0) ::close(fd);
      throw;
    }
    if (fd >= 0) ::close(fd);
    // The descriptors are closed once imported (or on failure).
    struct CloseFds {
      const std::vector<int>& fds;
      ~CloseFds() { close_fds(fds); }
    } closer{fds};
    on_every_rank(comm, what + ": mapping", [&] {
      reserved_ = round_up(partition_.total_bytes(), granularity);
      CUdeviceptr base = 0;
      check_cu(cu.mem_address_reserve(&base, reserved_, granularity, 0, 0),
               "cuMemAddressReserve of " + std::to_string(reserved_) + " bytes");
      base_ = reinterpret_cast<void*>(base);
      for (uint32_t r = 0; r < comm.world_size(); ++r) {
        const uint64_t bytes = round_up(partition_.bytes_of(r), granularity);
        if (bytes == 0) continue;
        if (r != rank) {
          if (fds[r] < 0) throw Error("rank " + std::to_string(r) + "'s part did not arrive");
          check_cu(cu.mem_import_from_shareable_handle(
                       &handles_[r], reinterpret_cast<void*>(static_cast<uintptr_t>(fds[r])),
                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   "cuMemImportFromShareableHandle of rank " + std::to_string(r) + "'s part");
        }
        const CUdeviceptr at = base + partition_.offset_of(r);
        check_cu(cu.mem_map(at, bytes, 0, handles_[r], 0),
                 "cuMemMap of rank " + std::to_string(r) + "'s part");
        mapped_.push_back({at, bytes});
        CUmemAccessDesc access{};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device_;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        check_cu(cu.mem_set_access(at, bytes, &access, 1),
                 "cuMemSetAccess of rank " + std::to_string(r) + "'s part");
        parts_[r] = reinterpret_cast<void*>(at);
      }
    });
  }

  void release() noexcept {
    if (mapped_.empty() && base_ == nullptr &&
        std::all_of(handles_.begin(), handles_.end(), [](auto h) { return h == 0; }))
      return;
    const DriverApi& cu = driver_api();
    const core::cuda::DeviceGuard on(device_);
    cudaDeviceSynchronize();
    for (const auto& [at, bytes] : mapped_) cu.mem_unmap(at, bytes);
    mapped_.clear();
    for (CUmemGenericAllocationHandle& h : handles_) {
      if (h != 0) cu.mem_release(h);
      h = 0;
    }
    if (base_ != nullptr) cu.mem_address_free(reinterpret_cast<CUdeviceptr>(base_), reserved_);
    base_ = nullptr;
    parts_.assign(parts_.size(), nullptr);
  }

  std::vector<CUmemGenericAllocationHandle> handles_;  // each rank's allocation, here
  std::vector<std::pair<CUdeviceptr, uint64_t>> mapped_;
  uint64_t reserved_ = 0;
};

// --- chunked: CUDA IPC -------------------------------------------------------------------------

class IpcMemory final : public WholeMemory {
 public:
  IpcMemory(dist::Communicator& comm, const MemoryOptions& options, int device)
      : WholeMemory(comm, options,
                    make_partition(options.size_bytes, options.entry_bytes, comm.world_size())) {
    device_ = device;
    const core::cuda::DeviceGuard on(device_);
    const std::string what = "wholememory: chunked device memory (CUDA IPC)";
    require_one_node(comm, what);
    require_peer_access(comm, device_, what);
    parts_.assign(comm.world_size(), nullptr);
    cudaIpcMemHandle_t handle{};
    try {
      share(handle, what);
    } catch (...) {
      release(false);
      throw;
    }
    cuda_accessible_ = true;
  }

  // Collective: every rank closes the others' parts before any owner frees its own.
  ~IpcMemory() override { release(true); }

 private:
  void share(cudaIpcMemHandle_t& handle, const std::string& what) {
    dist::Communicator& comm = *comm_;
    const uint32_t rank = comm.rank();
    on_every_rank(comm, what + ": cudaMalloc", [&] {
      const uint64_t bytes = partition_.bytes_of(rank);
      if (bytes == 0) return;
      core::cuda::check(cudaMalloc(&parts_[rank], bytes),
                        ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
      core::cuda::check(cudaIpcGetMemHandle(&handle, parts_[rank]), "cudaIpcGetMemHandle");
    });
    const std::vector<std::string> handles = dist::all_gather_strings(
        comm, std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
    on_every_rank(comm, what + ": cudaIpcOpenMemHandle", [&] {
      for (uint32_t r = 0; r < comm.world_size(); ++r) {
        if (r == rank || partition_.bytes_of(r) == 0) continue;
        cudaIpcMemHandle_t theirs{};
        std::memcpy(&theirs, handles[r].data(), sizeof(theirs));
        core::cuda::check(
            cudaIpcOpenMemHandle(&parts_[r], theirs, cudaIpcMemLazyEnablePeerAccess),
            ("cudaIpcOpenMemHandle of rank " + std::to_string(r) + "'s part").c_str());
      }
    });
  }

  void release(bool wait_for_all) noexcept {
    const core::cuda::DeviceGuard on(device_);
    cudaDeviceSynchronize();
    const uint32_t rank = comm_->rank();
    for (uint32_t r = 0; r < parts_.size(); ++r) {
      if (r != rank && parts_[r] != nullptr) cudaIpcCloseMemHandle(parts_[r]);
    }
    if (wait_for_all) {
      try {
        comm_->barrier();
      } catch (...) {
      }
    }
    if (parts_[rank] != nullptr) cudaFree(parts_[rank]);
    parts_.assign(parts_.size(), nullptr);
  }
};

// --- distributed: the local part only ----------------------------------------------------------

class LocalDeviceMemory final : public WholeMemory {
 public:
  LocalDeviceMemory(dist::Communicator& comm, const MemoryOptions& options, int device)
      : WholeMemory(comm, options,
                    make_partition(options.size_bytes, options.entry_bytes, comm.world_size())) {
    device_ = device;
    const core::cuda::DeviceGuard on(device_);
    parts_.assign(comm.world_size(), nullptr);
    const uint32_t rank = comm.rank();
    try {
      on_every_rank(comm, "wholememory: distributed device memory: cudaMalloc", [&] {
        const uint64_t bytes = partition_.bytes_of(rank);
        if (bytes == 0) return;
        core::cuda::check(cudaMalloc(&parts_[rank], bytes),
                          ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
      });
    } catch (...) {
      if (parts_[rank] != nullptr) cudaFree(parts_[rank]);
      throw;
    }
    cuda_accessible_ = true;
  }

  ~LocalDeviceMemory() override {
    const core::cuda::DeviceGuard on(device_);
    if (parts_[comm_->rank()] != nullptr) cudaFree(parts_[comm_->rank()]);
  }
};

}  // namespace

std::unique_ptr<WholeMemory> create_device_memory(dist::Communicator& comm,
                                                  const MemoryOptions& options) {
  int device = -1;
  std::string failure;
  try {
    device = pick_device(options.device, comm.rank());
    if (device < 0) failure = "this process sees no CUDA device";
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!dist::all_ranks_ok(comm, failure.empty())) {
    throw NotAvailable(
        "wholememory: location = device: " +
        (failure.empty() ? std::string("another rank has no CUDA device") : failure));
  }
  switch (options.type) {
    case MemoryType::kContinuous:
      return std::make_unique<VmmMemory>(comm, options, device);
    case MemoryType::kChunked:
      return std::make_unique<IpcMemory>(comm, options, device);
    case MemoryType::kDistributed:
      return std::make_unique<LocalDeviceMemory>(comm, options, device);
  }
  throw InvalidArgument("wholememory: unknown memory type");
}

}  // namespace dynemb::wholememory

// The CUDA calls the host-side code of the part needs; without the CUDA backend they report no
// device (no_cuda/cuda_support.cpp).
#pragma once

#include <cstddef>
#include <memory>

#include "dynemb/core/stream.hpp"
#include "dynemb/wholememory/memory.hpp"

namespace dynemb::wholememory {

// Devices this process sees (0 without CUDA or without a device).
int cuda_device_count();

// `requested` when >= 0 (checked against the count), else rank % device count; -1 when there is
// no device.
int pick_device(int requested, uint32_t rank);

// Registers [ptr, ptr + bytes) with CUDA as mapped memory (kernels on `device` address it at
// the same pointer); throws CudaError.
void register_host_memory(void* ptr, size_t bytes, int device);
// Undoes register_host_memory.
void unregister_host_memory(void* ptr) noexcept;

// Creates device-location memory (device_memory.cpp; NotAvailable without CUDA).
std::unique_ptr<WholeMemory> create_device_memory(dist::Communicator& comm,
                                                  const MemoryOptions& options);

}  // namespace dynemb::wholememory

namespace dynemb::wholememory {

// Makes `device` current for the scope, then restores the previous one (nothing for device < 0
// or without CUDA).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// Waits for `stream` on `device` (no-op without CUDA).
void sync_stream(StreamHandle stream, int device);

}  // namespace dynemb::wholememory

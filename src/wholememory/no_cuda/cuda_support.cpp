// Without the CUDA backend: no device, no device-location memory.
#include "cuda_support.hpp"

#include "dynemb/core/error.hpp"

namespace dynemb::wholememory {

int cuda_device_count() {
  return 0;
}

int pick_device(int, uint32_t) {
  return -1;
}

void register_host_memory(void*, size_t, int) {
  throw NotAvailable("wholememory: this build has no CUDA backend (register host memory)");
}

void unregister_host_memory(void*) noexcept {}

std::unique_ptr<WholeMemory> create_device_memory(dist::Communicator&, const MemoryOptions&) {
  throw NotAvailable(
      "wholememory: location = device needs the CUDA backend (this build has none; configure "
      "with -DDYNEMB_CUDA=ON)");
}

}  // namespace dynemb::wholememory

namespace dynemb::wholememory {

void sync_stream(StreamHandle, int) {}

DeviceScope::DeviceScope(int) {}

DeviceScope::~DeviceScope() = default;

}  // namespace dynemb::wholememory

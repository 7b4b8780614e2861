// Loading the driver entry points through the CUDA runtime.
#include "cuda/driver_api.hpp"

#include <cuda_runtime_api.h>

#include "dynemb/core/error.hpp"

namespace dynemb::wholememory {
namespace {

// The ABI these calls have had since CUDA 12.0.
constexpr unsigned int kDriverVersion = 12000;

template <class Fn>
void load(Fn& fn, const char* symbol) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &address, kDriverVersion, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();
    throw NotAvailable(std::string("wholememory: the CUDA driver has no ") + symbol +
                       " (continuous device memory needs virtual memory management)");
  }
  fn = reinterpret_cast<Fn>(address);
}

DriverApi load_all() {
  DriverApi api;
  load(api.get_error_name, "cuGetErrorName");
  load(api.get_error_string, "cuGetErrorString");
  load(api.device_get, "cuDeviceGet");
  load(api.device_get_attribute, "cuDeviceGetAttribute");
  load(api.mem_get_allocation_granularity, "cuMemGetAllocationGranularity");
  load(api.mem_create, "cuMemCreate");
  load(api.mem_export_to_shareable_handle, "cuMemExportToShareableHandle");
  load(api.mem_import_from_shareable_handle, "cuMemImportFromShareableHandle");
  load(api.mem_address_reserve, "cuMemAddressReserve");
  load(api.mem_address_free, "cuMemAddressFree");
  load(api.mem_map, "cuMemMap");
  load(api.mem_unmap, "cuMemUnmap");
  load(api.mem_set_access, "cuMemSetAccess");
  load(api.mem_release, "cuMemRelease");
  return api;
}

}  // namespace

const DriverApi& driver_api() {
  static const DriverApi api = load_all();
  return api;
}

void check_cu(CUresult status, const std::string& what) {
  if (status == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  driver_api().get_error_name(status, &name);
  driver_api().get_error_string(status, &text);
  throw CudaError("wholememory: " + what + ": " + (name ? name : "?") + ": " + (text ? text : "?"));
}

}  // namespace dynemb::wholememory

// The CUDA driver calls of continuous device memory (virtual memory management), reached
// through the runtime's driver entry points: the part links no libcuda, so binaries still start
// on machines without a driver.
#pragma once

#include <cuda.h>

#include <string>

namespace dynemb::wholememory {

struct DriverApi {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemExportToShareableHandle) mem_export_to_shareable_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) mem_import_from_shareable_handle = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
};

// The driver's functions (loaded once); NotAvailable naming the missing one.
const DriverApi& driver_api();

// Throws CudaError("<what>: <name>: <text>") unless status is CUDA_SUCCESS.
void check_cu(CUresult status, const std::string& what);

}  // namespace dynemb::wholememory

#include "cuda/driver_launch.hpp"

#include <string>

#include "dynemb/core/error.hpp"

namespace dynemb::cache::detail {
namespace {

using DriverLaunch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, CUstream, void**, void**);

// cuLaunchKernel, found through the runtime (so nothing links libcuda), or nullptr.
DriverLaunch driver_launch() {
  static const DriverLaunch fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not left for the next launch check
      return static_cast<DriverLaunch>(nullptr);
    }
    return reinterpret_cast<DriverLaunch>(p);
  }();
  return fn;
}

}  // namespace

CUfunction driver_function(const void* kernel) {
  if (driver_launch() == nullptr) return nullptr;
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, kernel) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<CUfunction>(f);
}

CUfunction DriverKernel::on(int device) {
  if (device < 0 || device >= kDevices) return nullptr;
  uintptr_t known = functions_[device].load(std::memory_order_relaxed);
  if (known == 0) {
    const CUfunction found = driver_function(kernel_);
    known = found == nullptr ? 1 : reinterpret_cast<uintptr_t>(found);
    functions_[device].store(known, std::memory_order_relaxed);
  }
  return known == 1 ? nullptr : reinterpret_cast<CUfunction>(known);
}

void launch_through_driver(CUfunction function, unsigned blocks, unsigned threads, void** args,
                           cudaStream_t stream, const char* what) {
  const CUresult result = driver_launch()(function, blocks, 1, 1, threads, 1, 1, 0,
                                          reinterpret_cast<CUstream>(stream), args, nullptr);
  if (result != CUDA_SUCCESS) {
    throw CudaError(std::string(what) + ": cuLaunchKernel failed with CUresult " +
                    std::to_string(static_cast<int>(result)));
  }
}

}  // namespace dynemb::cache::detail

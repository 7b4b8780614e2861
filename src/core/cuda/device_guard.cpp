#include "dynemb/core/cuda/device_guard.hpp"

#include <cuda_runtime_api.h>

#include "dynemb/core/cuda/check.hpp"

namespace dynemb::core::cuda {

namespace {

// The devices this process sees (fixed for its life).
int visible_devices() {
  static const int count = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  return count;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  // With one device visible, device 0 is always current: nothing to switch (and no API call,
  // which costs several microseconds before a call's first launch).
  if (device == 0 && visible_devices() == 1) return;
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);
}

}  // namespace dynemb::core::cuda

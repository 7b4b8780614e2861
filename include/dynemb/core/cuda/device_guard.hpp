// Makes one CUDA device current for a scope.
#pragma once

namespace dynemb::core::cuda {

// Makes `device` current for the guard's lifetime, then restores the previous device (nothing to
// do, and no API call, when the process sees one device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace dynemb::core::cuda

// The DLPack exchange structures, written from the DLPack specification (ABI of v0.8, the
// layout of the legacy "dltensor" capsule every PyTorch and NumPy release understands). Only
// the types dynemb exchanges are named; the numbering follows the specification.
#pragma once

#include <cstdint>

namespace dynemb::python::dlpack {

// Where a tensor's memory lives (DLDeviceType).
enum DeviceType : int32_t {
  kCpu = 1,
  kCuda = 2,
  kCudaHost = 3,  // pinned host memory: readable from the host
  kCudaManaged = 13,
};

// DLDevice: the device type and its ordinal.
struct Device {
  int32_t device_type;
  int32_t device_id;
};

// Element kinds (DLDataTypeCode).
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6 };

// DLDataType: kind, bits per lane and lanes per element.
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

// DLTensor: a view of memory; strides in elements (nullptr = compact row-major).
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};

// DLManagedTensor: a Tensor and what frees it. The consumer calls deleter once when done.
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

// Capsule names of the legacy protocol: a fresh tensor, and one a consumer has taken.
inline constexpr char kCapsuleName[] = "dltensor";
inline constexpr char kUsedCapsuleName[] = "used_dltensor";

}  // namespace dynemb::python::dlpack

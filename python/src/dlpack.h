#pragma once
// The DLPack exchange structs (the unversioned ABI that torch 1.13 and numpy 1.24 speak), written
// from the public specification: a DLManagedTensor travels inside a PyCapsule named "dltensor";
// the consumer renames it "used_dltensor" and calls `deleter` once it no longer needs the memory.
#include <cstdint>

namespace tessera::python::dlpack {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };

struct Device {
  DeviceType device_type;
  int32_t device_id;
};

enum TypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means compact row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

}  // namespace tessera::python::dlpack

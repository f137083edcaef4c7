#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace tessera {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int idx = 0) : type(t), index(static_cast<int16_t>(idx)) {}
  // Parses "cpu", "cuda", "cuda:1"; throws ValueError otherwise.
  explicit Device(std::string_view spec);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

inline constexpr Device kCPU{DeviceType::CPU, 0};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Number of devices of a type this build can use (1 for cpu; 0 for cuda without a GPU or
// without the CUDA backend).
int device_count(DeviceType type);

}  // namespace tessera

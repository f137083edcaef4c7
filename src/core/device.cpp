#include "tessera/core/device.h"

#include <charconv>

#include "tessera/core/error.h"
#include "tessera/runtime/cuda.h"

namespace tessera {

int device_count(DeviceType type) {
  if (type == DeviceType::CPU) return 1;
  return cuda::device_count();
}

Device::Device(std::string_view spec) {
  auto bad = [&] {
    return ValueError(detail::str("[device] expected 'cpu', 'cuda' or 'cuda:N', got '", spec, "'"));
  };
  std::string_view kind = spec.substr(0, spec.find(':'));
  if (kind == "cpu") type = DeviceType::CPU;
  else if (kind == "cuda") type = DeviceType::CUDA;
  else throw bad();
  if (kind.size() == spec.size()) return;
  std::string_view num = spec.substr(kind.size() + 1);
  int value = -1;
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), value);
  if (ec != std::errc() || ptr != num.data() + num.size() || value < 0) throw bad();
  index = static_cast<int16_t>(value);
}

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return "cuda:" + std::to_string(index);
}

}  // namespace tessera

#pragma once
// Type-safe kernel registry keyed by (op key, device type).
//
// An op key is a type that names the kernel signature:
//   TESSERA_DECLARE_KERNEL(add_kernel, void(TensorIterator&, const Scalar& alpha));
// Backends register an implementation whose type must match exactly (checked at compile time):
//   TESSERA_REGISTER_KERNEL(add_kernel, DeviceType::CPU, cpu_add);
// and ops call it with arguments that must convert to the signature:
//   call_kernel<add_kernel>(device, iter, alpha);
// Lookup is an array index: no strings, no void* casts.
#include <array>
#include <string_view>
#include <utility>

#include "tessera/core/device.h"
#include "tessera/core/error.h"

namespace tessera {

namespace detail {
class KernelRecorder;
// Set while this thread records a graph (runtime/graph.h); see core/kernel_capture.h.
extern thread_local KernelRecorder* t_kernel_recorder;
template <class Key, class... Args>
void capture_kernel(Device device, typename Key::Signature* fn, const Args&... args);

// Clears the recorder for a scope: the kernels a recorded kernel calls itself (a GEMM's casts
// and copies) belong to its replay. Recorded beside it they would run again after it on every
// replay, copying the recording's temporaries over the fresh result.
class KernelRecorderPause {
 public:
  KernelRecorderPause() : saved_(std::exchange(t_kernel_recorder, nullptr)) {}
  ~KernelRecorderPause() { t_kernel_recorder = saved_; }
  KernelRecorderPause(const KernelRecorderPause&) = delete;
  KernelRecorderPause& operator=(const KernelRecorderPause&) = delete;

 private:
  KernelRecorder* saved_;
};
}  // namespace detail

template <class Key>
struct KernelTable {
  using Fn = typename Key::Signature;
  static inline std::array<Fn*, kNumDeviceTypes> kernels{};
};

template <class Key>
bool register_kernel(DeviceType device, typename Key::Signature* fn) {
  KernelTable<Key>::kernels[static_cast<int>(device)] = fn;
  return true;
}

template <class Key>
bool has_kernel(DeviceType device) {
  return KernelTable<Key>::kernels[static_cast<int>(device)] != nullptr;
}

template <class Key, class... Args>
decltype(auto) call_kernel(Device device, Args&&... args) {
  auto* fn = KernelTable<Key>::kernels[static_cast<int>(device.type)];
  TESSERA_CHECK(fn != nullptr, NotImplementedError, "[", Key::name, "] expected a kernel for ",
                device.str(), ", got none registered");
  if (detail::t_kernel_recorder) [[unlikely]] {
    detail::capture_kernel<Key>(device, fn, args...);
    detail::KernelRecorderPause inner_calls_are_replayed_by_this_one;
    return fn(std::forward<Args>(args)...);
  }
  return fn(std::forward<Args>(args)...);
}

}  // namespace tessera

#include "tessera/core/kernel_capture.h"

#define TESSERA_DECLARE_KERNEL(key, ...)                  \
  struct key {                                            \
    using Signature = __VA_ARGS__;                        \
    static constexpr std::string_view name = #key;        \
  }

#define TESSERA_KERNEL_CONCAT_(a, b) a##b
#define TESSERA_KERNEL_CONCAT(a, b) TESSERA_KERNEL_CONCAT_(a, b)
// Registers fn (a function or captureless lambda) as key's kernel for device at load time.
#define TESSERA_REGISTER_KERNEL(key, device, fn)                                            \
  [[maybe_unused]] static const bool TESSERA_KERNEL_CONCAT(tessera_registered_, __LINE__) = \
      ::tessera::register_kernel<key>(device, fn)

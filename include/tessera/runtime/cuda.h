#pragma once
// The CUDA runtime as users see it: devices, the current device and stream, events and the
// caching allocator's statistics. Every function is usable in a build without the CUDA backend:
// is_available() is then false and the rest throw NotImplementedError naming the call.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "tessera/core/allocator.h"

namespace tessera::cuda {

bool is_available();
int device_count();
int current_device();
void set_device(int index);
// Waits for all work queued on the current device.
void synchronize();

// What benchmark results record about a GPU.
struct DeviceProperties {
  std::string name;        // "NVIDIA H100 80GB HBM3"
  int64_t total_memory = 0;  // bytes
  int driver_version = 0;  // cudaDriverGetVersion's, e.g. 13000
  int compute_capability = 0;  // major * 10 + minor
};
DeviceProperties get_device_properties(int index);

// Makes a device current for the scope and restores the previous one after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// A CUDA stream of one device. Stream() is a new stream; current_stream() the one kernels of
// this thread are queued on (the device's default stream until a StreamGuard sets another).
class Stream {
 public:
  Stream();  // a new non-blocking stream on the current device
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void synchronize() const;
  void* handle() const { return handle_; }  // cudaStream_t
  int device() const { return device_; }

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

// Queues this thread's kernels on stream for the scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  void* previous_ = nullptr;
};

// A marker in a stream: record() captures the work queued so far, wait() makes another stream
// wait for it without blocking the host, elapsed_ms() times two events.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record();  // on the current stream
  void wait(const Stream& stream) const;
  void wait() const;   // the current stream waits
  bool query() const;  // whether the recorded work is done
  void synchronize() const;
  float elapsed_ms(const Event& end) const;

 private:
  void* handle_ = nullptr;
};

// Whether float32 GEMMs may use TF32 tensor cores (10-bit mantissa products, float
// accumulation): off by default, as torch.backends.cuda.matmul.allow_tf32.
void set_allow_tf32(bool allow);
bool allow_tf32();

// How many GEMMs took each special path since the process started: run on zero-padded copies
// (a misaligned contiguous dim), weight gradients whose bias gradient came from the GEMM's
// epilogue rather than a separate sum, and linear_gelu calls whose GELU did. For tests and
// profiling.
struct GemmStats {
  int64_t padded = 0, fused_row_sums = 0, fused_gelus = 0;
};
GemmStats gemm_stats();

// The caching allocator (all devices together).
AllocatorStats memory_stats();
void empty_cache();
void reset_peak_memory_stats();

}  // namespace tessera::cuda

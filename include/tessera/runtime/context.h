#pragma once
// The runtime context as InfiniCore's infinicore.context names it: this thread's current device,
// its current stream, synchronisation and device events.
//
// On the CPU there is one stream per thread, the in-order host stream: ops run synchronously on
// the calling thread, so by the time an op returns its work is done. Syncing it returns at once,
// an event recorded on it is complete as soon as it is recorded (query() is true) and times the
// host clock, and waiting on it orders nothing that is not already ordered. On CUDA every call
// delegates to tessera::cuda (streams and events of the device); in a CPU-only build those throw
// NotImplementedError.
#include <chrono>
#include <memory>
#include <optional>

#include "tessera/core/device.h"

namespace tessera::cuda {
class Stream;
class Event;
}  // namespace tessera::cuda

namespace tessera::context {

// This thread's current device (cpu until set_device).
Device get_device();
// Makes device current for this thread (cuda:N also becomes the CUDA runtime's current device);
// ValueError when no such device exists.
void set_device(Device device);
// Devices of a type in this process (cpu: 1).
int device_count(DeviceType type);

// A queue of work on one device. Copies share the queue.
class Stream {
 public:
  // A new stream on device (cpu: the host stream, there is only one; cuda: a new CUDA stream).
  explicit Stream(Device device);
  Device device() const { return device_; }
  // Waits for the work queued on this stream.
  void synchronize() const;
  bool operator==(const Stream& other) const {
    return device_ == other.device_ && cuda_ == other.cuda_;
  }

 private:
  friend Stream get_stream();
  friend class DeviceEvent;
  Stream(Device device, std::shared_ptr<cuda::Stream> cuda) : device_(device), cuda_(cuda) {}
  Device device_;
  std::shared_ptr<cuda::Stream> cuda_;  // null: the device's default (current) stream
};

// The current stream of the current device.
Stream get_stream();
// Waits for the current stream's work.
void sync_stream();
// Waits for all work on the current device.
void sync_device();

// A marker in a stream, with torch.cuda.Event's semantics: record() marks the work queued so
// far, query() tells whether it is done (true for an event never recorded), synchronize() waits
// for it, wait() makes a stream wait for it, elapsed_time() gives the milliseconds between two
// events created with enable_timing and both recorded.
class DeviceEvent {
 public:
  explicit DeviceEvent(bool enable_timing = false);
  ~DeviceEvent();
  void record(const std::optional<Stream>& stream = std::nullopt);
  bool query() const;
  void synchronize() const;
  void wait(const std::optional<Stream>& stream = std::nullopt) const;
  double elapsed_time(const DeviceEvent& end) const;
  bool enable_timing() const { return enable_timing_; }
  bool is_recorded() const { return recorded_; }
  std::optional<Device> device() const { return device_; }

 private:
  bool enable_timing_;
  bool recorded_ = false;
  std::optional<Device> device_;  // where it was last recorded
  std::chrono::steady_clock::time_point host_time_{};
  std::shared_ptr<cuda::Event> cuda_;
};

}  // namespace tessera::context

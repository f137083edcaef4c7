// The profiler's GPU clock (device_time sessions): a CUDA event queued on the current stream for
// every marker, timed when the session stops. Each device has an origin event, recorded once the
// device is idle (synchronized first) and paired with the host clock (see make_origin), so
// device times sit on the host's clock. A marker is timed from the device's previous marker,
// not from the origin: cudaEventElapsedTime returns float milliseconds, which would lose
// microseconds to rounding a few seconds into a session.
#include <cuda_runtime.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/cuda/context.h"
#include "tessera/core/error.h"
#include "tessera/runtime/profiler.h"

namespace tessera::cuda {
namespace {

using profiler::detail::DeviceTimer;

class CudaDeviceTimer final : public DeviceTimer {
 public:
  void start(std::function<int64_t()> now_ns) override {
    std::lock_guard<std::mutex> lock(mutex_);
    now_ns_ = std::move(now_ns);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the failed query of a machine without a GPU
      count = 0;
    }
    TESSERA_CHECK(count > 0, RuntimeError, "[profiler] expected a GPU for device_time, got none");
    recycle();
    origins_.assign(static_cast<size_t>(count), Origin{});
    free_.resize(static_cast<size_t>(count));
    TESSERA_CHECK(make_origin(current_device()), RuntimeError,
                  "[profiler] expected to record a CUDA event on device ", current_device(),
                  ", got ", cudaGetErrorString(cudaGetLastError()));
  }

  int64_t mark(int64_t /*host_ns*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 ||
        device >= static_cast<int>(origins_.size()))
      return -1;
    if (origins_[device].event == nullptr && !make_origin(device)) return -1;
    cudaEvent_t event = take_event(device);
    if (event == nullptr || cudaEventRecord(event, current_stream()) != cudaSuccess) {
      if (event != nullptr) free_[device].push_back(event);
      return -1;
    }
    markers_.push_back({device, event});
    return static_cast<int64_t>(markers_.size()) - 1;
  }

  std::vector<Stamp> stop() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Stamp> stamps(markers_.size());
    // Per device, the last timed event and its time in ns on the host clock.
    std::vector<std::pair<cudaEvent_t, double>> last(origins_.size());
    for (size_t d = 0; d < origins_.size(); ++d)
      last[d] = {origins_[d].event, static_cast<double>(origins_[d].host_ns)};
    for (size_t i = 0; i < markers_.size(); ++i) {
      const Marker& m = markers_[i];
      auto& [previous, previous_ns] = last[m.device];
      float ms = 0;
      if (cudaEventSynchronize(m.event) != cudaSuccess ||
          cudaEventElapsedTime(&ms, previous, m.event) != cudaSuccess)
        continue;  // stays unknown (-1)
      previous = m.event;
      previous_ns += static_cast<double>(ms) * 1e6;
      stamps[i] = {m.device, static_cast<int64_t>(std::llround(previous_ns))};
    }
    (void)cudaGetLastError();
    recycle();
    return stamps;
  }

 private:
  struct Origin {
    cudaEvent_t event = nullptr;
    int64_t host_ns = 0;
  };
  struct Marker {
    int device;
    cudaEvent_t event;
  };

  // Events belong to the device current when they were made: one pool per device.
  cudaEvent_t take_event(int device) {
    std::vector<cudaEvent_t>& pool = free_[device];
    if (!pool.empty()) {
      cudaEvent_t event = pool.back();
      pool.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    return cudaEventCreate(&event) == cudaSuccess ? event : nullptr;
  }

  // The host time at which a device event ran is known only within a window: from its record
  // call to the return of its synchronize. The origin pairs an event with the end of the
  // narrowest of a few windows: never earlier than the event ran (so no GPU span sits before
  // the host launched its work; pairing the window's start put spans ~25 us early on an H100),
  // late by at most that window.
  bool make_origin(int device) {
    if (cudaDeviceSynchronize() != cudaSuccess) return false;
    Origin best;
    int64_t best_window = 0;
    for (int round = 0; round < 3; ++round) {
      cudaEvent_t event = take_event(device);
      if (event == nullptr) break;
      const int64_t before = now_ns_();
      if (cudaEventRecord(event, current_stream()) != cudaSuccess ||
          cudaEventSynchronize(event) != cudaSuccess) {
        free_[device].push_back(event);
        break;
      }
      const int64_t after = now_ns_();
      if (best.event == nullptr || after - before < best_window) {
        if (best.event != nullptr) free_[device].push_back(best.event);
        best = {event, after};
        best_window = after - before;
      } else {
        free_[device].push_back(event);
      }
    }
    if (best.event == nullptr) return false;
    origins_[device] = best;
    return true;
  }

  // Returns the last session's events to the pools.
  void recycle() {
    for (const Marker& m : markers_) free_[m.device].push_back(m.event);
    markers_.clear();
    for (size_t d = 0; d < origins_.size(); ++d)
      if (origins_[d].event != nullptr) free_[d].push_back(origins_[d].event);
    origins_.assign(origins_.size(), Origin{});
  }

  std::mutex mutex_;
  std::function<int64_t()> now_ns_;  // the session's host clock
  std::vector<Origin> origins_;
  std::vector<Marker> markers_;
  std::vector<std::vector<cudaEvent_t>> free_;
};

[[maybe_unused]] const bool registered =
    (profiler::detail::register_device_timer(new CudaDeviceTimer), true);  // never destroyed

}  // namespace
}  // namespace tessera::cuda

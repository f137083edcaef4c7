// tessera::context: the current device and stream, synchronisation and events; the CPU's host
// stream is synchronous (see context.h), CUDA delegates to tessera::cuda.
#include "tessera/runtime/context.h"

#include "tessera/core/error.h"
#include "tessera/runtime/cuda.h"

namespace tessera::context {

namespace {
thread_local Device t_device = kCPU;
}  // namespace

Device get_device() { return t_device; }

void set_device(Device device) {
  if (device.is_cuda()) {
    const int count = cuda::device_count();
    TESSERA_CHECK(!cuda::is_available() || device.index < count, ValueError,
                  "[context.set_device] expected a CUDA device index below ", count, ", got ",
                  device.str());
    cuda::set_device(device.index);  // NotImplementedError in a CPU-only build
  } else {
    TESSERA_CHECK(device.index == 0, ValueError,
                  "[context.set_device] expected cpu or cpu:0 (one host device), got ",
                  device.str());
  }
  t_device = device;
}

int device_count(DeviceType type) { return type == DeviceType::CPU ? 1 : cuda::device_count(); }

Stream::Stream(Device device) : device_(device) {
  if (device.is_cuda()) {
    cuda::DeviceGuard guard(device.index);
    cuda_ = std::make_shared<cuda::Stream>();
  }
}

void Stream::synchronize() const {
  if (!device_.is_cuda()) return;  // host stream: its work finished when the ops returned
  if (cuda_) return cuda_->synchronize();
  cuda::DeviceGuard guard(device_.index);
  cuda::synchronize();  // the default stream: wait for the device (legacy stream semantics)
}

Stream get_stream() { return Stream(t_device, nullptr); }
void sync_stream() { get_stream().synchronize(); }
void sync_device() {
  if (t_device.is_cuda()) cuda::synchronize();
}

DeviceEvent::DeviceEvent(bool enable_timing) : enable_timing_(enable_timing) {}
DeviceEvent::~DeviceEvent() = default;

void DeviceEvent::record(const std::optional<Stream>& stream) {
  const Stream s = stream.value_or(get_stream());
  TESSERA_CHECK(!device_ || *device_ == s.device(), ValueError,
                "[DeviceEvent.record] expected a stream on ", device_ ? device_->str() : "",
                " (where the event was recorded before), got one on ", s.device().str());
  if (s.device().is_cuda()) {
    cuda::DeviceGuard device(s.device().index);
    if (!cuda_) cuda_ = std::make_shared<cuda::Event>();
    if (s.cuda_) {
      cuda::StreamGuard guard(*s.cuda_);
      cuda_->record();
    } else {
      cuda_->record();
    }
  } else {
    host_time_ = std::chrono::steady_clock::now();
  }
  device_ = s.device();
  recorded_ = true;
}

bool DeviceEvent::query() const { return !cuda_ || cuda_->query(); }

void DeviceEvent::synchronize() const {
  if (cuda_) cuda_->synchronize();
}

void DeviceEvent::wait(const std::optional<Stream>& stream) const {
  const Stream s = stream.value_or(get_stream());
  if (!recorded_ || !s.device().is_cuda()) return;  // the host stream is already in order
  TESSERA_CHECK(device_ == s.device(), ValueError, "[DeviceEvent.wait] expected a stream on ",
                device_->str(), ", got one on ", s.device().str());
  if (s.cuda_) return cuda_->wait(*s.cuda_);
  cuda::DeviceGuard device(s.device().index);
  cuda_->wait();
}

double DeviceEvent::elapsed_time(const DeviceEvent& end) const {
  TESSERA_CHECK(enable_timing_ && end.enable_timing_, ValueError,
                "[DeviceEvent.elapsed_time] expected both events created with "
                "enable_timing=True, got enable_timing=",
                enable_timing_ ? "True" : "False", " and ", end.enable_timing_ ? "True" : "False");
  TESSERA_CHECK(recorded_ && end.recorded_, ValueError,
                "[DeviceEvent.elapsed_time] expected both events recorded, got ",
                recorded_ ? "the end event" : "the start event", " never recorded");
  TESSERA_CHECK(device_ == end.device_, ValueError,
                "[DeviceEvent.elapsed_time] expected events on one device, got ", device_->str(),
                " and ", end.device_->str());
  if (cuda_) return cuda_->elapsed_ms(*end.cuda_);
  return std::chrono::duration<double, std::milli>(end.host_time_ - host_time_).count();
}

}  // namespace tessera::context

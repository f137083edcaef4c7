// Devices, the current device and stream, events, cuBLASLt handles: the public tessera::cuda
// API (tessera/runtime/cuda.h) and the backend's context.h.
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/runtime/cuda.h"

namespace tessera::cuda {

namespace {
constexpr int kMaxDevices = 16;
thread_local cudaStream_t t_stream[kMaxDevices] = {};

cudaStream_t as_stream(void* handle) { return static_cast<cudaStream_t>(handle); }
cudaEvent_t as_event(void* handle) { return static_cast<cudaEvent_t>(handle); }

void check_index(int index) {
  const int n = device_count();
  TESSERA_CHECK(index >= 0 && index < n, ValueError,
                "[cuda.set_device] expected a device index in [0, ", n, "), got ", index);
}
}  // namespace

int device_count() {
  int n = 0;
  cudaError_t status = cudaGetDeviceCount(&n);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();  // clear the sticky error: no GPU is a normal state
    return 0;
  }
  TESSERA_CUDA_CHECK(status);
  return n;
}

bool is_available() { return device_count() > 0; }

int current_device() {
  int d = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  check_index(index);
  TESSERA_CUDA_CHECK(cudaSetDevice(index));
}

void synchronize() { TESSERA_CUDA_CHECK(cudaDeviceSynchronize()); }

DeviceProperties get_device_properties(int index) {
  check_index(index);
  cudaDeviceProp prop{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceProperties out;
  out.name = prop.name;
  out.total_memory = static_cast<int64_t>(prop.totalGlobalMem);
  out.compute_capability = prop.major * 10 + prop.minor;
  TESSERA_CUDA_CHECK(cudaDriverGetVersion(&out.driver_version));
  return out;
}

cudaStream_t current_stream() {
  cudaStream_t s = t_stream[current_device()];
  return s ? s : cudaStreamLegacy;
}

void set_current_stream(cudaStream_t stream) { t_stream[current_device()] = stream; }

const cudaDeviceProp& device_properties() {
  static std::once_flag once;
  static std::vector<cudaDeviceProp> props;
  std::call_once(once, [] {
    props.resize(device_count());
    for (size_t i = 0; i < props.size(); ++i)
      TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&props[i], static_cast<int>(i)));
  });
  return props.at(current_device());
}

cublasLtHandle_t cublaslt_handle() {
  static std::mutex mutex;
  static cublasLtHandle_t handles[kMaxDevices] = {};
  std::lock_guard lock(mutex);
  cublasLtHandle_t& h = handles[current_device()];
  if (!h) TESSERA_CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

DeviceGuard::DeviceGuard(int index) {
  previous_ = current_device();
  if (index != previous_) set_device(index);
}
DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

Stream::Stream() {
  device_ = current_device();
  cudaStream_t s;
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}
Stream::~Stream() { (void)cudaStreamDestroy(as_stream(handle_)); }
void Stream::synchronize() const { TESSERA_CUDA_CHECK(cudaStreamSynchronize(as_stream(handle_))); }

StreamGuard::StreamGuard(const Stream& stream) {
  TESSERA_CHECK(stream.device() == current_device(), ValueError,
                "[cuda.StreamGuard] expected a stream of the current device ", current_device(),
                ", got one of device ", stream.device());
  previous_ = t_stream[stream.device()];
  set_current_stream(as_stream(stream.handle()));
}
StreamGuard::~StreamGuard() { set_current_stream(as_stream(previous_)); }

Event::Event() {
  cudaEvent_t e;
  TESSERA_CUDA_CHECK(cudaEventCreate(&e));
  handle_ = e;
}
Event::~Event() { (void)cudaEventDestroy(as_event(handle_)); }
void Event::record() { TESSERA_CUDA_CHECK(cudaEventRecord(as_event(handle_), current_stream())); }
void Event::wait(const Stream& stream) const {
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream.handle()), as_event(handle_), 0));
}
void Event::wait() const {
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), as_event(handle_), 0));
}
bool Event::query() const { return event_completed(as_event(handle_)); }
void Event::synchronize() const { TESSERA_CUDA_CHECK(cudaEventSynchronize(as_event(handle_))); }
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(handle_), as_event(end.handle_)));
  return ms;
}

}  // namespace tessera::cuda

// tessera::cuda in a build without the CUDA backend: no devices; everything that would need
// one throws NotImplementedError naming the call. CUDA builds leave this file out.
#include "tessera/core/error.h"
#include "tessera/runtime/cuda.h"

namespace tessera::cuda {
namespace {
[[noreturn]] void unavailable(const char* call) {
  throw NotImplementedError(detail::str("[cuda.", call,
                                        "] expected a build with the CUDA backend (cmake "
                                        "--preset cuda), got a CPU-only build"));
}
}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
int current_device() { unavailable("current_device"); }
void set_device(int) { unavailable("set_device"); }
void synchronize() { unavailable("synchronize"); }
DeviceProperties get_device_properties(int) { unavailable("get_device_properties"); }
DeviceGuard::DeviceGuard(int) { unavailable("DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
Stream::Stream() { unavailable("Stream"); }
Stream::~Stream() = default;
void Stream::synchronize() const { unavailable("Stream.synchronize"); }
StreamGuard::StreamGuard(const Stream&) { unavailable("StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::Event() { unavailable("Event"); }
Event::~Event() = default;
void Event::record() { unavailable("Event.record"); }
void Event::wait(const Stream&) const { unavailable("Event.wait"); }
void Event::wait() const { unavailable("Event.wait"); }
bool Event::query() const { unavailable("Event.query"); }
void Event::synchronize() const { unavailable("Event.synchronize"); }
float Event::elapsed_ms(const Event&) const { unavailable("Event.elapsed_ms"); }
void set_allow_tf32(bool) { unavailable("set_allow_tf32"); }
bool allow_tf32() { return false; }
GemmStats gemm_stats() { return {}; }
AllocatorStats memory_stats() { unavailable("memory_stats"); }
void empty_cache() { unavailable("empty_cache"); }
void reset_peak_memory_stats() { unavailable("reset_peak_memory_stats"); }

}  // namespace tessera::cuda

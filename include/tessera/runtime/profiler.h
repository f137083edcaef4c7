#pragma once
// The profiler (torch.profiler): while a Profiler is alive, every op (through its OpScope), every
// backward node the autograd engine runs and every RecordFunction range is recorded with its
// host time, thread, input shapes, bytes allocated and peak memory. With device_time (torch's
// ProfilerActivity.CUDA) each of them also gets its GPU time: markers queued on the current
// stream as it begins and ends, timed once the session stops. A span covers the kernels the call
// queued; when the GPU runs ahead of the host and waits for work, it covers that wait too.
//
//   profiler::Profiler prof;
//   train_step();
//   profiler::Profile p = prof.stop();
//   std::cout << p.table();                    // grouped like key_averages().table()
//   p.export_chrome_trace("trace.json");       // chrome://tracing, ui.perfetto.dev
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::profiler {

enum class EventKind : uint8_t { kOp, kBackward, kUser };
std::string_view kind_name(EventKind kind);  // "op", "backward", "user"

// One recorded call. Times are nanoseconds since the session started.
struct Event {
  std::string name;
  EventKind kind;
  std::string input_shapes;  // "[[16, 128], [128, 512]]" for ops, empty otherwise
  int64_t start_ns = 0, end_ns = 0;
  int64_t self_ns = 0;               // end - start minus the time of the events nested in it
  int64_t allocated_bytes = 0;       // bytes allocated during the call (nested calls included)
  int64_t self_allocated_bytes = 0;  // allocated_bytes minus those of the events nested in it
  int64_t peak_bytes = 0;            // highest live bytes during the call above those at its start
  uint32_t thread = 0;               // 0 for the thread that started the session, then 1, 2, ...
  int depth = 0;                     // nesting level on its thread
  // With device_time: the span on the GPU, on the session's clock (device_start_ns < 0 when not
  // measured, e.g. begun and ended on different devices), and that span minus the spans of the
  // events nested in it.
  int device = -1;
  int64_t device_start_ns = -1, device_end_ns = -1;
  int64_t self_device_ns = 0;
  bool has_device_time() const { return device_start_ns >= 0; }
};

// Events of one name (and input shapes, when grouped so) summed: a row of the table.
struct EventSummary {
  std::string name;
  EventKind kind;
  std::string input_shapes;
  int64_t calls = 0;
  int64_t total_ns = 0, self_ns = 0;
  int64_t allocated_bytes = 0, self_allocated_bytes = 0;
  int64_t peak_bytes = 0;                     // the highest of the calls'
  int64_t device_ns = 0, self_device_ns = 0;  // GPU time of the calls measured (device_time)
};

enum class SortBy { kSelfTime, kTotalTime, kCalls, kAllocated, kPeak, kSelfDevice, kDeviceTotal };

class Profile {
 public:
  Profile() = default;
  explicit Profile(std::vector<Event> events);
  const std::vector<Event>& events() const { return events_; }
  // Rows sorted by sort_by (largest first), one per name or per (name, input shapes).
  std::vector<EventSummary> key_averages(bool group_by_input_shape = false,
                                         SortBy sort_by = SortBy::kSelfTime) const;
  // Whether any event has a GPU time (the session had device_time and ran work on a GPU).
  bool has_device_time() const;
  // The rows as a text table; row_limit < 0 prints all. GPU columns appear with device time.
  std::string table(SortBy sort_by = SortBy::kSelfTime, int row_limit = -1,
                    bool group_by_input_shape = false) const;
  // Chrome trace-event JSON ({"traceEvents": [complete events "ph": "X"]}).
  std::string chrome_trace() const;
  // Writes chrome_trace() to path atomically.
  void export_chrome_trace(const std::string& path) const;

 private:
  std::vector<Event> events_;
};

// Parses "self", "total", "calls", "memory", "peak", "self_cuda", "cuda_total" and torch's
// names for them ("self_cpu_time_total", "cpu_time_total", "count", "self_cuda_time_total",
// "cuda_time_total"); ValueError otherwise.
SortBy parse_sort_by(std::string_view name);

struct ProfilerOptions {
  // Time every event on the GPU too (RuntimeError when no GPU can be used). It queues two CUDA
  // events per op, which adds host time.
  bool device_time = false;
};

// A profiling session. One at a time (RuntimeError for a second).
class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();  // stops recording if stop() was not called
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  // Stops recording and returns what was recorded (empty on a second call).
  Profile stop();
  static bool is_recording();

 private:
  bool stopped_ = false;
};

// Records a named range of user code while a session runs (torch.profiler.record_function).
class RecordFunction {
 public:
  explicit RecordFunction(std::string_view name, EventKind kind = EventKind::kUser);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  int64_t record_ = -1;
};

namespace detail {
// Opens an event and returns its handle (-1 when no session records).
int64_t begin_event(std::string_view name, EventKind kind, std::string input_shapes = {});
void end_event(int64_t handle);

// Timestamps GPU work for sessions with device_time; the CUDA backend registers one.
class DeviceTimer {
 public:
  struct Stamp {
    int device = -1;
    int64_t ns = -1;  // on the session's clock; -1 when unknown
  };
  virtual ~DeviceTimer() = default;
  // Starts a session whose host clock reads now_ns() (RuntimeError when no GPU can be used).
  // The timer places device times on that clock, reading it when a device is idle.
  virtual void start(std::function<int64_t()> now_ns) = 0;
  // Queues a marker on the calling thread's current device and stream (host_ns: the host time
  // of the marked event); its id, -1 on failure.
  virtual int64_t mark(int64_t host_ns) = 0;
  // Waits for the markers and returns their stamps by id; ends the session.
  virtual std::vector<Stamp> stop() = 0;
};
// Sets the timer (null: none) and returns the previous one; the caller keeps it alive.
DeviceTimer* register_device_timer(DeviceTimer* timer);
}  // namespace detail

}  // namespace tessera::profiler

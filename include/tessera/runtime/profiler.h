#pragma once
// The profiler (torch.profiler): while a Profiler is alive, every op (through its OpScope), every
// backward node the autograd engine runs and every RecordFunction range is recorded with its
// host time, thread, input shapes, bytes allocated and peak memory.
//
//   profiler::Profiler prof;
//   train_step();
//   profiler::Profile p = prof.stop();
//   std::cout << p.table();                    // grouped like key_averages().table()
//   p.export_chrome_trace("trace.json");       // chrome://tracing, ui.perfetto.dev
#include <cstdint>
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
};

// Events of one name (and input shapes, when grouped so) summed: a row of the table.
struct EventSummary {
  std::string name;
  EventKind kind;
  std::string input_shapes;
  int64_t calls = 0;
  int64_t total_ns = 0, self_ns = 0;
  int64_t allocated_bytes = 0, self_allocated_bytes = 0;
  int64_t peak_bytes = 0;  // the highest of the calls'
};

enum class SortBy { kSelfTime, kTotalTime, kCalls, kAllocated, kPeak };

class Profile {
 public:
  Profile() = default;
  explicit Profile(std::vector<Event> events);
  const std::vector<Event>& events() const { return events_; }
  // Rows sorted by sort_by (largest first), one per name or per (name, input shapes).
  std::vector<EventSummary> key_averages(bool group_by_input_shape = false,
                                         SortBy sort_by = SortBy::kSelfTime) const;
  // The rows as a text table; row_limit < 0 prints all.
  std::string table(SortBy sort_by = SortBy::kSelfTime, int row_limit = -1,
                    bool group_by_input_shape = false) const;
  // Chrome trace-event JSON ({"traceEvents": [complete events "ph": "X"]}).
  std::string chrome_trace() const;
  // Writes chrome_trace() to path atomically.
  void export_chrome_trace(const std::string& path) const;

 private:
  std::vector<Event> events_;
};

// Parses "self", "total", "calls", "memory", "peak"; ValueError otherwise.
SortBy parse_sort_by(std::string_view name);

// A profiling session. One at a time (RuntimeError for a second).
class Profiler {
 public:
  Profiler();
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
}  // namespace detail

}  // namespace tessera::profiler

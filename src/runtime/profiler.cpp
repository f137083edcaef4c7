// Profiler sessions: events are appended under one mutex (ops from every thread), each thread
// keeps the stack of its open events for nesting depth and per-call memory figures. With
// device_time every event also gets two GPU markers, resolved into spans when the session stops.
#include "tessera/runtime/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/runtime/op_scope.h"

namespace tessera::profiler {

namespace {

using Clock = std::chrono::steady_clock;

struct Session {
  std::mutex mutex;
  uint64_t id = 0;  // changes with every session, so stale handles are ignored
  Clock::time_point start;
  std::vector<Event> events;
  std::unordered_map<std::thread::id, uint32_t> threads;
  detail::DeviceTimer* timer = nullptr;              // set for a device_time session
  std::vector<std::pair<int64_t, int64_t>> markers;  // per event: begin and end marker ids
};

std::atomic<detail::DeviceTimer*> g_device_timer{nullptr};

Session& session() {
  static Session s;
  return s;
}

// An open event of this thread, with what its memory figures are measured against.
struct OpenEvent {
  uint64_t session;
  int64_t handle;
  int64_t outer_peak;  // the allocator's peak before this event reset it
  int64_t live_at_start, allocated_at_start;
};
thread_local std::vector<OpenEvent> t_open;

int64_t now_ns(const Session& s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s.start).count();
}

// Each event's own share: its time and allocations minus those of the events directly nested
// in it (its children on the same thread).
void compute_self_figures(std::vector<Event>& events) {
  std::unordered_map<uint32_t, std::vector<size_t>> open;  // per thread, in begin order
  for (size_t i = 0; i < events.size(); ++i) {
    Event& e = events[i];
    e.self_ns = e.end_ns - e.start_ns;
    e.self_allocated_bytes = e.allocated_bytes;
    const int64_t device_ns = e.has_device_time() ? e.device_end_ns - e.device_start_ns : 0;
    e.self_device_ns = device_ns;
    std::vector<size_t>& stack = open[e.thread];
    while (!stack.empty() && events[stack.back()].depth >= e.depth) stack.pop_back();
    if (!stack.empty()) {
      Event& parent = events[stack.back()];
      parent.self_ns -= e.end_ns - e.start_ns;
      parent.self_allocated_bytes -= e.allocated_bytes;
      parent.self_device_ns -= device_ns;
    }
    stack.push_back(i);
  }
}

// Gives each event its GPU span from its two markers' stamps (both on one device, else none).
void resolve_device_spans(std::vector<Event>& events,
                          const std::vector<std::pair<int64_t, int64_t>>& markers,
                          const std::vector<detail::DeviceTimer::Stamp>& stamps) {
  auto stamp = [&](int64_t id) {
    return id >= 0 && id < static_cast<int64_t>(stamps.size()) ? stamps[size_t(id)]
                                                               : detail::DeviceTimer::Stamp{};
  };
  for (size_t i = 0; i < events.size() && i < markers.size(); ++i) {
    const detail::DeviceTimer::Stamp begin = stamp(markers[i].first),
                                     end = stamp(markers[i].second);
    if (begin.ns < 0 || end.ns < 0 || begin.device != end.device) continue;
    events[i].device = begin.device;
    events[i].device_start_ns = begin.ns;
    events[i].device_end_ns = std::max(begin.ns, end.ns);
  }
}

}  // namespace

std::string_view kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::kOp:
      return "op";
    case EventKind::kBackward:
      return "backward";
    case EventKind::kUser:
      return "user";
  }
  return "?";
}

Profiler::Profiler(ProfilerOptions options) {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  TESSERA_CHECK(!tessera::detail::g_profiling.load(), RuntimeError,
                "[profiler] expected one profiling session at a time, got a second");
  detail::DeviceTimer* timer = options.device_time ? g_device_timer.load() : nullptr;
  TESSERA_CHECK(!options.device_time || timer != nullptr, RuntimeError,
                "[profiler] expected a build with the CUDA backend for device_time, got a "
                "CPU-only build");
  s.start = Clock::now();
  if (timer != nullptr) timer->start([&s] { return now_ns(s); });  // throws without a GPU
  ++s.id;
  s.events.clear();
  s.markers.clear();
  s.timer = timer;
  s.threads.clear();
  s.threads[std::this_thread::get_id()] = 0;
  tessera::detail::g_profiling.store(true);
}

Profiler::~Profiler() {
  if (!stopped_) stop();
}

Profile Profiler::stop() {
  if (stopped_) return Profile();
  stopped_ = true;
  Session& s = session();
  std::vector<Event> events;
  std::vector<std::pair<int64_t, int64_t>> markers;
  detail::DeviceTimer* timer = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    tessera::detail::g_profiling.store(false);
    const int64_t end = now_ns(s);
    for (Event& e : s.events)
      if (e.end_ns < e.start_ns) e.end_ns = end;  // still open when the session stopped
    events.swap(s.events);
    markers.swap(s.markers);
    std::swap(timer, s.timer);
    ++s.id;
  }
  if (timer != nullptr) resolve_device_spans(events, markers, timer->stop());
  return Profile(std::move(events));
}

bool Profiler::is_recording() { return tessera::detail::g_profiling.load(); }

RecordFunction::RecordFunction(std::string_view name, EventKind kind)
    : record_(detail::begin_event(name, kind)) {}

RecordFunction::~RecordFunction() {
  if (record_ >= 0) detail::end_event(record_);
}

Profile::Profile(std::vector<Event> events) : events_(std::move(events)) {
  compute_self_figures(events_);
}

namespace detail {

int64_t begin_event(std::string_view name, EventKind kind, std::string input_shapes) {
  if (!tessera::detail::g_profiling.load(std::memory_order_relaxed)) return -1;
  Session& s = session();
  Allocator* allocator = cpu_allocator();
  const AllocatorStats stats = allocator->stats();
  int64_t handle;
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!tessera::detail::g_profiling.load()) return -1;
    auto [it, added] =
        s.threads.try_emplace(std::this_thread::get_id(), static_cast<uint32_t>(s.threads.size()));
    handle = static_cast<int64_t>(s.events.size());
    id = s.id;
    Event e{.name = std::string(name), .kind = kind, .input_shapes = std::move(input_shapes)};
    e.start_ns = now_ns(s);
    e.end_ns = -1;
    e.thread = it->second;
    e.depth = static_cast<int>(t_open.size());
    s.events.push_back(std::move(e));
    if (s.timer != nullptr) s.markers.emplace_back(s.timer->mark(s.events.back().start_ns), -1);
  }
  t_open.push_back({id, handle, stats.peak_bytes, stats.live_bytes, stats.allocated_bytes});
  allocator->reset_peak();
  return handle;
}

void end_event(int64_t handle) {
  if (t_open.empty() || t_open.back().handle != handle) return;
  const OpenEvent open = t_open.back();
  t_open.pop_back();
  Allocator* allocator = cpu_allocator();
  const AllocatorStats stats = allocator->stats();
  allocator->raise_peak(open.outer_peak);
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (open.session != s.id || handle >= static_cast<int64_t>(s.events.size())) return;
  Event& e = s.events[static_cast<size_t>(handle)];
  e.end_ns = now_ns(s);
  if (s.timer != nullptr) s.markers[static_cast<size_t>(handle)].second = s.timer->mark(e.end_ns);
  e.allocated_bytes = stats.allocated_bytes - open.allocated_at_start;
  e.peak_bytes = std::max<int64_t>(0, stats.peak_bytes - open.live_at_start);
}

DeviceTimer* register_device_timer(DeviceTimer* timer) { return g_device_timer.exchange(timer); }

}  // namespace detail
}  // namespace tessera::profiler

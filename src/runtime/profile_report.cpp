// What a finished profile shows: rows grouped like torch.profiler's key_averages(), the text
// table, and the Chrome trace-event JSON.
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/runtime/profiler.h"

namespace tessera::profiler {

namespace {

std::string format_time(int64_t ns) {
  char buf[32];
  if (ns >= 1'000'000'000)
    std::snprintf(buf, sizeof buf, "%.3fs", static_cast<double>(ns) / 1e9);
  else if (ns >= 1'000'000)
    std::snprintf(buf, sizeof buf, "%.3fms", static_cast<double>(ns) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3fus", static_cast<double>(ns) / 1e3);
  return buf;
}

std::string format_bytes(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (bytes >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else if (bytes >= (1 << 10))
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / (1 << 10));
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

std::string format_percent(int64_t part, int64_t whole) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.2f%%",
                whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return buf;
}

int64_t sort_key(const EventSummary& s, SortBy by) {
  switch (by) {
    case SortBy::kSelfTime:
      return s.self_ns;
    case SortBy::kTotalTime:
      return s.total_ns;
    case SortBy::kCalls:
      return s.calls;
    case SortBy::kAllocated:
      return s.allocated_bytes;
    case SortBy::kPeak:
      return s.peak_bytes;
    case SortBy::kSelfDevice:
      return s.self_device_ns;
    case SortBy::kDeviceTotal:
      return s.device_ns;
  }
  return 0;
}

// Trace rows of GPU spans sit beside the host threads' rows, one per device.
constexpr int kDeviceTraceTid = 1000;

}  // namespace

SortBy parse_sort_by(std::string_view name) {
  if (name == "self" || name == "self_cpu_time_total") return SortBy::kSelfTime;
  if (name == "total" || name == "cpu_time_total") return SortBy::kTotalTime;
  if (name == "calls" || name == "count") return SortBy::kCalls;
  if (name == "memory") return SortBy::kAllocated;
  if (name == "peak") return SortBy::kPeak;
  if (name == "self_cuda" || name == "self_cuda_time_total") return SortBy::kSelfDevice;
  if (name == "cuda_total" || name == "cuda_time_total") return SortBy::kDeviceTotal;
  throw ValueError(tessera::detail::str("[profiler] expected sort_by self, total, calls, memory, "
                                        "peak, self_cuda or cuda_total, got '",
                                        name, "'"));
}

bool Profile::has_device_time() const {
  return std::any_of(events_.begin(), events_.end(),
                     [](const Event& e) { return e.has_device_time(); });
}

std::vector<EventSummary> Profile::key_averages(bool group_by_input_shape, SortBy sort_by) const {
  std::map<std::tuple<std::string, EventKind, std::string>, EventSummary> rows;
  for (const Event& e : events_) {
    const std::string shapes = group_by_input_shape ? e.input_shapes : std::string();
    EventSummary& row = rows[{e.name, e.kind, shapes}];
    row.name = e.name;
    row.kind = e.kind;
    row.input_shapes = shapes;
    ++row.calls;
    row.total_ns += e.end_ns - e.start_ns;
    row.self_ns += e.self_ns;
    row.allocated_bytes += e.allocated_bytes;
    row.self_allocated_bytes += e.self_allocated_bytes;
    row.peak_bytes = std::max(row.peak_bytes, e.peak_bytes);
    if (e.has_device_time()) {
      row.device_ns += e.device_end_ns - e.device_start_ns;
      row.self_device_ns += e.self_device_ns;
    }
  }
  std::vector<EventSummary> out;
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  std::stable_sort(out.begin(), out.end(), [sort_by](const EventSummary& a, const EventSummary& b) {
    return sort_key(a, sort_by) > sort_key(b, sort_by);
  });
  return out;
}

std::string Profile::table(SortBy sort_by, int row_limit, bool group_by_input_shape) const {
  const std::vector<EventSummary> rows = key_averages(group_by_input_shape, sort_by);
  const bool device = has_device_time();
  int64_t self_total = 0, self_device_total = 0;
  for (const EventSummary& r : rows) {
    self_total += r.self_ns;
    self_device_total += r.self_device_ns;
  }
  std::vector<std::vector<std::string>> cells = {{"Name", "Kind", "Self CPU %", "Self CPU",
                                                  "CPU total %", "CPU total", "CPU time avg"}};
  if (device)
    cells[0].insert(cells[0].end(), {"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"});
  cells[0].insert(cells[0].end(), {"Self Mem", "Mem", "Peak Mem", "# of Calls"});
  if (group_by_input_shape) cells[0].push_back("Input Shapes");
  const size_t n = row_limit < 0 ? rows.size() : std::min(rows.size(), size_t(row_limit));
  for (size_t i = 0; i < n; ++i) {
    const EventSummary& r = rows[i];
    std::vector<std::string> row = {
        r.name,          std::string(kind_name(r.kind)), format_percent(r.self_ns, self_total),
        format_time(r.self_ns), format_percent(r.total_ns, self_total),
        format_time(r.total_ns), format_time(r.total_ns / r.calls)};
    if (device)
      row.insert(row.end(), {format_time(r.self_device_ns),
                             format_percent(r.self_device_ns, self_device_total),
                             format_time(r.device_ns), format_time(r.device_ns / r.calls)});
    row.insert(row.end(), {format_bytes(r.self_allocated_bytes), format_bytes(r.allocated_bytes),
                           format_bytes(r.peak_bytes), std::to_string(r.calls)});
    if (group_by_input_shape) row.push_back(r.input_shapes);
    cells.push_back(std::move(row));
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string rule;
  for (size_t c = 0; c < width.size(); ++c) rule += std::string(width[c], '-') + "  ";
  rule.back() = '\n';
  std::string out = rule;
  for (size_t r = 0; r < cells.size(); ++r) {
    for (size_t c = 0; c < cells[r].size(); ++c) {
      // The name, kind and input shapes left-aligned, figures right-aligned, as torch prints them.
      const bool left = c <= 1 || (group_by_input_shape && c + 1 == cells[0].size());
      const std::string pad(width[c] - cells[r][c].size(), ' ');
      out += left ? cells[r][c] + pad : pad + cells[r][c];
      out += c + 1 < cells[r].size() ? "  " : "\n";
    }
    if (r == 0) out += rule;
  }
  out += rule;
  out += "Self CPU time total: " + format_time(self_total) + "\n";
  if (device) out += "Self CUDA time total: " + format_time(self_device_total) + "\n";
  return out;
}

std::string Profile::chrome_trace() const {
  nlohmann::json trace_events = nlohmann::json::array();
  const int pid = static_cast<int>(::getpid());
  trace_events.push_back({{"name", "process_name"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"tid", 0},
                          {"args", {{"name", "tessera"}}}});
  for (const Event& e : events_) {
    nlohmann::json args = {{"allocated_bytes", e.allocated_bytes}, {"peak_bytes", e.peak_bytes}};
    if (!e.input_shapes.empty()) args["Input Shapes"] = e.input_shapes;
    trace_events.push_back({{"name", e.name},
                            {"cat", kind_name(e.kind)},
                            {"ph", "X"},
                            {"ts", static_cast<double>(e.start_ns) / 1e3},
                            {"dur", static_cast<double>(e.end_ns - e.start_ns) / 1e3},
                            {"pid", pid},
                            {"tid", e.thread},
                            {"args", std::move(args)}});
  }
  // The GPU spans, one row per device, named by thread_name metadata.
  std::set<int> named_devices;
  for (const Event& e : events_) {
    if (!e.has_device_time()) continue;
    const int tid = kDeviceTraceTid + e.device;
    if (named_devices.insert(e.device).second)
      trace_events.push_back({{"name", "thread_name"},
                              {"ph", "M"},
                              {"pid", pid},
                              {"tid", tid},
                              {"args", {{"name", tessera::detail::str("CUDA ", e.device)}}}});
    trace_events.push_back({{"name", e.name},
                            {"cat", tessera::detail::str(kind_name(e.kind), "_cuda")},
                            {"ph", "X"},
                            {"ts", static_cast<double>(e.device_start_ns) / 1e3},
                            {"dur", static_cast<double>(e.device_end_ns - e.device_start_ns) / 1e3},
                            {"pid", pid},
                            {"tid", tid},
                            {"args", nlohmann::json::object()}});
  }
  return nlohmann::json{{"traceEvents", std::move(trace_events)}, {"displayTimeUnit", "ms"}}.dump();
}

void Profile::export_chrome_trace(const std::string& path) const {
  io::write_file_atomic(path, chrome_trace(), "profiler");
}

}  // namespace tessera::profiler

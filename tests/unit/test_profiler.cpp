// The profiler: every op and backward node of a training step is recorded and listed in the
// table; the Chrome trace is valid trace-event JSON; memory and nesting figures add up.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tessera/models/gpt2.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

using profiler::EventKind;

profiler::Profile profile_gpt2_step() {
  models::GPT2Config c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  manual_seed(5);
  models::GPT2 model(c);
  optim::AdamW opt(model.parameters());
  Tensor x = randint(0, 32, {2, 16}), y = randint(0, 32, {2, 16});
  profiler::Profiler prof;
  {
    profiler::RecordFunction step("train_step");
    model.loss(x, y).backward();
    opt.step();
  }
  return prof.stop();
}

TEST(Profiler, TableListsEveryOpAndBackwardNodeTheStepRan) {
  const profiler::Profile p = profile_gpt2_step();
  std::set<std::string> ops, nodes;
  for (const profiler::Event& e : p.events()) {
    EXPECT_GE(e.end_ns, e.start_ns) << e.name;
    (e.kind == EventKind::kBackward ? nodes : ops).insert(e.name);
  }
  for (const char* op : {"linear", "layer_norm", "cross_entropy", "scaled_dot_product_attention",
                         "linear_gelu", "embedding", "add"})
    EXPECT_TRUE(ops.count(op)) << op << " not recorded";
  EXPECT_TRUE(nodes.count("MatmulBackward")) << "backward nodes are recorded";
  const std::string table = p.table();
  for (const std::string& name : ops) EXPECT_NE(table.find(name), std::string::npos) << name;
  for (const std::string& name : nodes) EXPECT_NE(table.find(name), std::string::npos) << name;
  EXPECT_NE(table.find("Self CPU %"), std::string::npos);
  EXPECT_NE(table.find("Self CPU time total:"), std::string::npos);
}

TEST(Profiler, SelfFiguresSumToTheTopLevelOnesAndCallsAreCounted) {
  const profiler::Profile p = profile_gpt2_step();
  int64_t top = 0, self = 0, top_bytes = 0, self_bytes = 0;
  for (const profiler::Event& e : p.events()) {
    EXPECT_GE(e.self_ns, 0) << e.name;
    EXPECT_GE(e.self_allocated_bytes, 0) << e.name;
    self += e.self_ns;
    self_bytes += e.self_allocated_bytes;
    if (e.depth == 0) {
      top += e.end_ns - e.start_ns;
      top_bytes += e.allocated_bytes;
    }
  }
  EXPECT_EQ(self, top);
  EXPECT_EQ(self_bytes, top_bytes);
  EXPECT_GT(top_bytes, 0);
  int64_t linears = 0;
  for (const profiler::Event& e : p.events()) linears += e.name == "linear";
  for (const profiler::EventSummary& row : p.key_averages())
    if (row.name == "linear") EXPECT_EQ(row.calls, linears);
  EXPECT_EQ(p.events().front().name, "train_step");
  EXPECT_EQ(p.events().front().kind, EventKind::kUser);
}

TEST(Profiler, RecordsAllocatedBytesPeakAndInputShapes) {
  profiler::Profiler prof;
  Tensor a = ones({256, 256});  // 256 KiB
  Tensor b = matmul(a, a);
  profiler::Profile p = prof.stop();
  bool seen = false;
  for (const profiler::Event& e : p.events()) {
    if (e.name != "matmul") continue;
    seen = true;
    EXPECT_EQ(e.input_shapes, "[[256, 256], [256, 256]]");
    EXPECT_GE(e.allocated_bytes, 256 * 256 * 4);
    EXPECT_GE(e.peak_bytes, 256 * 256 * 4);
  }
  EXPECT_TRUE(seen);
  EXPECT_NE(p.table(profiler::SortBy::kTotalTime, -1, true).find("[[256, 256], [256, 256]]"),
            std::string::npos);
}

TEST(Profiler, ChromeTraceIsValidTraceEventJson) {
  const profiler::Profile p = profile_gpt2_step();
  testing::TempDir dir;
  p.export_chrome_trace(dir.file("trace.json"));
  std::ifstream in(dir.file("trace.json"));
  const nlohmann::json trace = nlohmann::json::parse(in);
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace["traceEvents"].is_array());
  size_t complete = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e["name"].is_string());
    ASSERT_TRUE(e["ph"].is_string());
    ASSERT_TRUE(e["pid"].is_number_integer());
    ASSERT_TRUE(e["tid"].is_number_integer());
    if (e["ph"] == "M") continue;  // metadata (process name)
    ASSERT_EQ(e["ph"], "X");
    ASSERT_TRUE(e["ts"].is_number() && e["ts"].get<double>() >= 0);
    ASSERT_TRUE(e["dur"].is_number() && e["dur"].get<double>() >= 0);
    ASSERT_TRUE(e["cat"] == "op" || e["cat"] == "backward" || e["cat"] == "user");
    ASSERT_TRUE(e["args"].is_object());
    ++complete;
  }
  EXPECT_EQ(complete, p.events().size());
}

TEST(Profiler, OneSessionAtATimeAndNothingRecordedOutside) {
  {
    profiler::Profiler a;
    EXPECT_TESSERA_ERROR(profiler::Profiler(), RuntimeError, "one profiling session");
  }
  EXPECT_FALSE(profiler::Profiler::is_recording());
  profiler::Profiler b;
  Tensor t = ones({2});
  const profiler::Profile p = b.stop();
  ASSERT_FALSE(p.events().empty());
  EXPECT_EQ(p.events().front().name, "ones");
  Tensor u = t + t;
  profiler::Profiler c;
  EXPECT_TRUE(c.stop().events().empty());
}

TEST(Profiler, CastsToTheSameDtypeAreNoOpsAndNotRecorded) {
  Tensor x = ones({4});
  profiler::Profiler prof;
  EXPECT_TRUE(cast(x, kFloat32).is_same(x));
  (void)cast(x, kBFloat16);
  const profiler::Profile p = prof.stop();
  int64_t casts = 0;
  for (const profiler::Event& e : p.events()) casts += e.name == "cast";
  EXPECT_EQ(casts, 1);
}

// A GPU clock without a GPU: stamps follow the host clock (x3, plus 7 ns), on device 0, or on
// device 1 for markers made while on_second_device is set.
class FakeDeviceTimer final : public profiler::detail::DeviceTimer {
 public:
  void start(std::function<int64_t()>) override { devices_.clear(); }
  int64_t mark(int64_t host_ns) override {
    devices_.push_back({on_second_device ? 1 : 0, 3 * host_ns + 7});
    return static_cast<int64_t>(devices_.size()) - 1;
  }
  std::vector<Stamp> stop() override { return std::move(devices_); }
  bool on_second_device = false;

 private:
  std::vector<Stamp> devices_;
};

// Registers a timer for the test's scope and puts the previous one (the CUDA backend's) back.
struct TimerScope {
  explicit TimerScope(profiler::detail::DeviceTimer* timer)
      : previous(profiler::detail::register_device_timer(timer)) {}
  ~TimerScope() { profiler::detail::register_device_timer(previous); }
  profiler::detail::DeviceTimer* previous;
};

TEST(Profiler, DeviceTimeNeedsADeviceTimer) {
  TimerScope none(nullptr);
  EXPECT_TESSERA_ERROR(profiler::Profiler({.device_time = true}), RuntimeError, "CUDA backend");
  EXPECT_FALSE(profiler::Profiler::is_recording());
  const profiler::Profile p = profile_gpt2_step();  // host time only: no GPU columns
  EXPECT_FALSE(p.has_device_time());
  EXPECT_EQ(p.table().find("CUDA"), std::string::npos);
}

TEST(Profiler, DeviceSpansNestSortAndShowInTheTableAndTrace) {
  FakeDeviceTimer timer;
  TimerScope scope(&timer);
  profiler::Profiler prof({.device_time = true});
  Tensor x = randn({64, 32}), w = randn({16, 32}).requires_grad_();
  linear(x, w).sum().backward();
  timer.on_second_device = true;
  Tensor squared = x * x;
  {
    profiler::RecordFunction across("moves_device");  // begins on device 1, ends on device 0
    timer.on_second_device = false;
  }
  const profiler::Profile p = prof.stop();
  ASSERT_TRUE(p.has_device_time());
  const auto mul = std::find_if(p.events().begin(), p.events().end(),
                                [](const profiler::Event& e) { return e.name == "mul"; });
  ASSERT_NE(mul, p.events().end());
  // mul and what it called ran on device 1.
  auto on_second = [&](double ts_us) {
    return ts_us >= mul->device_start_ns / 1e3 && ts_us < mul->device_end_ns / 1e3;
  };
  int64_t top = 0, self = 0;
  for (const profiler::Event& e : p.events()) {
    if (e.name == "moves_device") {
      EXPECT_FALSE(e.has_device_time()) << "markers on two devices give no span";
      continue;
    }
    ASSERT_TRUE(e.has_device_time()) << e.name;
    EXPECT_EQ(e.device, e.start_ns >= mul->start_ns && e.end_ns <= mul->end_ns ? 1 : 0) << e.name;
    EXPECT_EQ(e.device_start_ns, 3 * e.start_ns + 7) << e.name;
    EXPECT_EQ(e.device_end_ns, 3 * e.end_ns + 7) << e.name;
    EXPECT_GE(e.self_device_ns, 0) << e.name;
    self += e.self_device_ns;
    if (e.depth == 0) top += e.device_end_ns - e.device_start_ns;
  }
  EXPECT_EQ(self, top) << "self GPU times add up to the top-level spans";

  const std::vector<profiler::EventSummary> rows =
      p.key_averages(false, profiler::parse_sort_by("self_cuda_time_total"));
  for (size_t i = 1; i < rows.size(); ++i)
    EXPECT_GE(rows[i - 1].self_device_ns, rows[i].self_device_ns);
  const std::string table = p.table(profiler::SortBy::kDeviceTotal);
  for (const char* column : {"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg",
                             "Self CUDA time total:", "linear"})
    EXPECT_NE(table.find(column), std::string::npos) << column;

  const nlohmann::json trace = nlohmann::json::parse(p.chrome_trace());
  std::set<std::string> gpu_rows;
  size_t gpu_spans = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") gpu_rows.insert(e["args"]["name"]);
    if (e["ph"] == "X" && e["tid"].get<int>() >= 1000) {
      ++gpu_spans;
      EXPECT_EQ(e["tid"].get<int>() == 1001, on_second(e["ts"].get<double>())) << e;
      EXPECT_TRUE(e["cat"].get<std::string>().ends_with("_cuda")) << e;
    }
  }
  EXPECT_EQ(gpu_rows, (std::set<std::string>{"CUDA 0", "CUDA 1"}));
  EXPECT_EQ(gpu_spans, p.events().size() - 1);
  EXPECT_TESSERA_ERROR(profiler::parse_sort_by("gpu"), ValueError, "self_cuda");
}

}  // namespace
}  // namespace tessera

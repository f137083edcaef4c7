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
                         "gelu", "embedding", "add"})
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

}  // namespace
}  // namespace tessera

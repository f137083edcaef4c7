// Graph recording: the per-thread recorder the op scopes and call_kernel feed, and Graph.
#include "tessera/runtime/graph.h"

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "runtime/graph_recorder.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/runtime/cuda.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

namespace detail {

thread_local KernelRecorder* t_kernel_recorder = nullptr;

namespace {

// Why a replay could not repeat op, or null. Random ops would repeat the recorded draw; the
// others read tensor data on the host (values or shapes decided there are not replayed).
const char* unreplayable(const OpInfo& op) {
  if (op.family == "random")
    return "random ops draw new numbers each call, a replay would repeat the recorded draw";
  // Paged attention reads its sequence lengths, slots and block tables on the host.
  static constexpr std::array<std::string_view, 10> kHostReads{
      "sort",        "argsort", "topk",          "nonzero",         "masked_select",
      "multinomial", "unique",  "paged_caching", "paged_attention", "paged_attention_prefill"};
  for (std::string_view name : kHostReads)
    if (op.name == name)
      return "it reads tensor data on the host (its result's shape or values are decided there), "
             "which a replay does not repeat";
  return nullptr;
}

class GraphRecorder final : public KernelRecorder {
 public:
  GraphRecorder() { autograd::GradMode::set_enabled(false); }
  ~GraphRecorder() override { autograd::GradMode::set_enabled(grad_enabled_); }

  void note_op(const OpInfo& op, std::span<const Tensor* const> inputs, const TensorList* list,
               int depth) {
    if (depth == 1) outer_op_ = op.name;
    if (const char* why = unreplayable(op)) fail(op.name, why);
    for (const Tensor* t : inputs) note_input(*t);
    if (list)
      for (const Tensor& t : *list) note_input(t);
  }

  void capture(CapturedKernel call) override {
    for (const CapturedTensor& t : call.tensors) {
      const StorageImpl* s = t.tensor.impl()->storage().get();
      if (!external_.contains(s)) {
        produced_.insert(s);
        continue;
      }
      if (call.known_access && t.written)
        fail(call.name,
             "it writes into a tensor made before recording (in place on an input or weight), "
             "which every replay would do again; write into a new tensor instead");
    }
    calls_.push_back(std::move(call));
  }

  void refuse(std::string_view kernel, std::string_view why) override { fail(kernel, why); }

  // Ends the recording: its replay plan, or the first refusal as a RuntimeError.
  ReplayPlan finish() {
    if (!error_.empty())
      throw RuntimeError("[stop_graph_recording] the recording failed: " + error_);
    std::unordered_set<const StorageImpl*> external;
    for (const auto& [s, storage] : external_) external.insert(s);
    produced_.clear();
    return plan_replay(std::move(calls_), external);
  }

 private:
  void note_input(const Tensor& t) {
    if (!t.defined()) return;
    const Storage& s = t.impl()->storage();
    if (!s || produced_.contains(s.get())) return;
    external_.emplace(s.get(), s);
  }
  [[noreturn]] void fail(std::string_view what, std::string_view why) {
    std::string msg = detail::str("[graph] cannot record ", what);
    if (!outer_op_.empty() && outer_op_ != what) msg += detail::str(" (called by ", outer_op_, ")");
    msg += detail::str(": ", why);
    if (error_.empty()) error_ = msg;
    throw RuntimeError(msg);
  }

  bool grad_enabled_ = autograd::GradMode::is_enabled();
  std::string_view outer_op_;
  std::vector<CapturedKernel> calls_;
  std::unordered_set<const StorageImpl*> produced_;  // first seen in a captured call (kept alive)
  // Storages of tensors made before recording, kept alive for the replays.
  std::unordered_map<const StorageImpl*, Storage> external_;
  std::string error_;
};

thread_local std::unique_ptr<GraphRecorder> t_recorder;

}  // namespace

void note_recorded_op(const OpInfo& op, std::span<const Tensor* const> inputs,
                      const TensorList* list, int depth) {
  if (t_recorder) t_recorder->note_op(op, inputs, list, depth);
}

}  // namespace detail

Graph::Graph() = default;
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

namespace {
int64_t allocations() {
  int64_t n = cpu_allocator()->stats().num_allocs;
  if (cuda::is_available()) n += get_allocator(DeviceType::CUDA)->stats().num_allocs;
  return n;
}
}  // namespace

void Graph::run() {
  const int64_t before = allocations();
  for (const detail::ReplayStep& step : steps_) step.run();
  stats_.last_replay_allocations = allocations() - before;
  ++stats_.replays;
}

std::vector<std::string> Graph::steps() const {
  std::vector<std::string> names;
  for (const detail::ReplayStep& step : steps_) names.push_back(step.name);
  return names;
}

void start_graph_recording() {
  TESSERA_CHECK(!detail::t_recorder, RuntimeError,
                "[start_graph_recording] expected no recording in progress on this thread, got "
                "one started earlier (call stop_graph_recording first)");
  detail::t_recorder = std::make_unique<detail::GraphRecorder>();
  detail::t_kernel_recorder = detail::t_recorder.get();
  detail::t_op_hooks.recording = true;
}

Graph stop_graph_recording() {
  TESSERA_CHECK(detail::t_recorder, RuntimeError,
                "[stop_graph_recording] expected a recording in progress on this thread, got "
                "none (call start_graph_recording first)");
  std::unique_ptr<detail::GraphRecorder> recorder = std::move(detail::t_recorder);
  detail::t_kernel_recorder = nullptr;
  detail::t_op_hooks.recording = false;
  detail::ReplayPlan plan = recorder->finish();
  Graph graph;
  graph.steps_ = std::move(plan.steps);
  graph.stats_ = plan.stats;
  return graph;
}

bool is_graph_recording() { return detail::t_recorder != nullptr; }

}  // namespace tessera

#include "tessera/runtime/op_scope.h"

#include "runtime/autocast_cast.h"
#include "runtime/graph_recorder.h"
#include "tessera/runtime/profiler.h"

namespace tessera {

namespace detail {
thread_local OpHooks t_op_hooks;
std::atomic<bool> g_profiling{false};
}  // namespace detail

const Tensor& OpScope::none() {
  static const Tensor undefined;
  return undefined;
}

void OpScope::check_devices(const OpInfo& op) const {
  if (op.name == "copy_") return;
  std::string devices;
  auto add = [&](const Tensor& t) {
    if (!t.defined()) return;
    const std::string d = t.device().str();
    if (devices.find(d) == std::string::npos) devices += (devices.empty() ? "" : " and ") + d;
  };
  for (size_t i = 0; i < num_inputs_; ++i) add(*inputs_[i]);
  if (list_)
    for (const Tensor& t : *list_) add(t);
  throw RuntimeError(detail::str("[", op.name, "] expected all tensors on one device, got ",
                                 devices, " (move them with .to(device))"));
}

void OpScope::enter(const OpInfo& op) {
  detail::OpHooks& hooks = detail::t_op_hooks;
  ++hooks.depth;
  entered_ = true;
  try {
    if (hooks.recording)
      detail::note_recorded_op(op, std::span(inputs_.data(), num_inputs_), list_, hooks.depth);
    if (detail::g_profiling.load(std::memory_order_relaxed))
      record_ = profiler::detail::begin_event(op.name, profiler::EventKind::kOp, input_shapes());
    // Only the outermost op casts: the ops it calls get the dtypes it chose.
    if (hooks.autocast && !hooks.no_autocast && hooks.depth == 1 && op.cast != CastPolicy::kNone)
      widen_ = detail::autocast_inputs(op, std::span(inputs_.data(), num_inputs_),
                                       std::span(cast_.data(), num_inputs_));
  } catch (...) {
    leave();
    entered_ = false;
    throw;
  }
}

void OpScope::leave() {
  --detail::t_op_hooks.depth;
  if (record_ >= 0) profiler::detail::end_event(record_);
}

std::string OpScope::input_shapes() const {
  std::string s = "[";
  auto add = [&](const Tensor& t) {
    if (s.size() > 1) s += ", ";
    s += t.defined() ? detail::str(t.sizes()) : "[]";
  };
  for (size_t i = 0; i < num_inputs_; ++i) add(*inputs_[i]);
  if (list_)
    for (const Tensor& t : *list_) add(t);
  return s + "]";
}

}  // namespace tessera

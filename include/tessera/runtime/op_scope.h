#pragma once
// The one entry of every public op. An op opens
//   TESSERA_OP_SCOPE("linear", input, weight, bias);
// first thing; the scope is where autocast casts the op's inputs (by the cast policy of its
// registry entry) and where the profiler records the call. Ops with a cast policy read their
// inputs back through op_scope.arg(i); no op body knows about autocast or the profiler. While a
// graph is recorded the scope also tells the recorder which op runs on which inputs (it refuses
// ops a replay cannot repeat); the kernels the op calls are captured by call_kernel.
//
// When neither autocast nor the profiler is on (the usual case) a scope costs one thread-local
// read. Inputs on different devices are refused here, for every op but copy_. Autocast applies to the outermost op only: the ops an op calls internally run in the
// dtypes it hands them, as with PyTorch's autocast dispatch key.
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "tessera/core/tensor.h"
#include "tessera/ops/op_info.h"

namespace tessera {

namespace detail {
// Per-thread switches the scopes read.
struct OpHooks {
  bool autocast = false;     // some device type has autocast on
  bool no_autocast = false;  // a backward pass runs: autocast is off whatever the guards say
  bool recording = false;    // this thread records a graph (runtime/graph.h)
  int depth = 0;             // open scopes (counted only while a hook is on)
};
extern thread_local OpHooks t_op_hooks;
// A profiler session is recording (every thread's ops).
extern std::atomic<bool> g_profiling;
}  // namespace detail

class OpScope {
 public:
  static constexpr size_t kMaxInputs = 8;

  // inputs: Tensor, std::optional<Tensor> or TensorList arguments, in the op's order.
  template <class... Inputs>
  explicit OpScope(const OpInfo& op, const Inputs&... inputs) {
    static_assert(sizeof...(Inputs) <= kMaxInputs, "OpScope holds at most kMaxInputs inputs");
    (collect(inputs), ...);
    if (!on_one_device()) [[unlikely]]
      check_devices(op);
    if (detail::t_op_hooks.autocast || detail::t_op_hooks.recording ||
        detail::g_profiling.load(std::memory_order_relaxed)) [[unlikely]]
      enter(op);
  }
  ~OpScope() {
    if (entered_) [[unlikely]]
      leave();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  // Tensor input i as the op must use it: autocast's cast of it, or the input itself.
  const Tensor& arg(size_t i) const { return cast_[i].defined() ? cast_[i] : *inputs_[i]; }
  // Optional tensor input i the same way (nullopt when the input was nullopt).
  std::optional<Tensor> optional_arg(size_t i) const { return if_defined(arg(i)); }
  // Autocast asks this kFloat32Widening op to widen its 16-bit input itself and return float32.
  bool widen_to_float32() const { return widen_; }

 private:
  void collect(const Tensor& t) { inputs_[num_inputs_++] = &t; }
  void collect(const std::optional<Tensor>& t) { collect(t ? *t : none()); }
  void collect(const TensorList& list) { list_ = &list; }
  static const Tensor& none();
  bool on_one_device() const {
    if (num_inputs_ + (list_ ? list_->size() : 0) < 2) return true;
    std::optional<Device> first;
    auto same = [&](const Tensor& t) {
      if (!t.defined()) return true;
      if (!first) first = t.device();
      return t.device() == *first;
    };
    for (size_t i = 0; i < num_inputs_; ++i)
      if (!same(*inputs_[i])) return false;
    if (list_)
      for (const Tensor& t : *list_)
        if (!same(t)) return false;
    return true;
  }
  // Throws RuntimeError naming the op and the devices (copy_ alone may mix them).
  void check_devices(const OpInfo& op) const;
  void enter(const OpInfo& op);
  void leave();
  std::string input_shapes() const;

  std::array<const Tensor*, kMaxInputs> inputs_{};
  std::array<Tensor, kMaxInputs> cast_{};
  size_t num_inputs_ = 0;
  const TensorList* list_ = nullptr;
  bool entered_ = false;
  bool widen_ = false;
  int64_t record_ = -1;  // the profiler's record of this call, or -1
};

}  // namespace tessera

// Opens the op scope `op_scope` for the registered op `name` (looked up once per call site).
#define TESSERA_OP_SCOPE(name, ...)                                            \
  static const ::tessera::OpInfo& tessera_op_info_ = ::tessera::find_op(name); \
  ::tessera::OpScope op_scope(tessera_op_info_ __VA_OPT__(, ) __VA_ARGS__)

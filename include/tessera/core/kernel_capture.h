#pragma once
// Kernel capture for graph recording (runtime/graph.h). While a thread records, call_kernel hands
// every kernel call here before running it: the call is kept as a closure over copies of its
// arguments (tensors are handles, so the buffers stay alive), which a Graph replays later. The
// tensors a call touches are listed with what it does to them, so the graph can tell its inputs,
// intermediates and outputs apart, fold constants and fuse elementwise chains.
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::detail {

// Evaluates one elementwise functor over n contiguous elements of one dtype (the fused replay).
using TileFn = void (*)(DType dtype, char* out, const char* const* in, int64_t n);

struct CapturedTensor {
  Tensor tensor;
  bool written;  // the call may write it (unknown kernels: every tensor is read and written)
};

struct CapturedKernel {
  std::string_view name;
  Device device;
  std::function<void()> run;            // the call with its recorded arguments
  std::vector<CapturedTensor> tensors;  // in argument order; written ones of known kernels first
  bool known_access = false;            // `written` flags are exact (else conservative)
  TileFn tile = nullptr;                // elementwise functor kernels
};

// Receives captured calls (the graph recorder of this thread, or null).
class KernelRecorder {
 public:
  virtual ~KernelRecorder() = default;
  virtual void capture(CapturedKernel call) = 0;
  // Throws when an argument of this kernel cannot be replayed (a raw pointer).
  virtual void refuse(std::string_view kernel, std::string_view why) = 0;
};
extern thread_local KernelRecorder* t_kernel_recorder;

// The tensors inside one argument; kernels' argument structs and iterators add overloads found
// by argument-dependent lookup (capture_tensors(const TensorIterator&, ...)).
inline void capture_tensors(const Tensor& t, std::vector<CapturedTensor>& out, bool& known) {
  if (t.defined()) out.push_back({t, true});
  known = false;
}
inline void capture_tensors(const TensorList& list, std::vector<CapturedTensor>& out, bool& known) {
  for (const Tensor& t : list) capture_tensors(t, out, known);
}
template <class T>
void capture_tensors(const T&, std::vector<CapturedTensor>&, bool&) {}

template <class Sig>
struct KernelParams;
template <class R, class... P>
struct KernelParams<R(P...)> {
  using Tuple = std::tuple<std::remove_cvref_t<P>...>;
  static constexpr bool has_raw_pointer = (std::is_pointer_v<std::remove_cvref_t<P>> || ...);
};

template <class Key, class... Args>
void capture_kernel(Device device, typename Key::Signature* fn, const Args&... args) {
  using Params = KernelParams<typename Key::Signature>;
  if constexpr (Params::has_raw_pointer) {
    t_kernel_recorder->refuse(Key::name, "it takes raw pointers the graph cannot keep alive");
  } else {
    CapturedKernel call{Key::name, device, {}, {}, true, nullptr};
    auto saved = std::make_shared<typename Params::Tuple>(args...);
    call.run = [fn, saved] { std::apply(fn, *saved); };
    std::apply(
        [&](const auto&... a) { (capture_tensors(a, call.tensors, call.known_access), ...); },
        *saved);
    // Kernels whose leading tensor arguments are their only outputs say how many (fill_kernel).
    if constexpr (requires { Key::kOutputs; }) {
      for (size_t i = 0; i < call.tensors.size(); ++i) call.tensors[i].written = i < Key::kOutputs;
      call.known_access = true;
    }
    if constexpr (requires { &Key::tile; }) call.tile = &Key::tile;
    t_kernel_recorder->capture(std::move(call));
  }
}

}  // namespace tessera::detail

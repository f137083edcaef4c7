#include "tessera/autograd/checkpoint.h"

#include "runtime/autocast_cast.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/generator.h"

namespace tessera::autograd {

namespace {

// Sets the default generator to state for its scope, then puts back where it was.
class GeneratorStateScope {
 public:
  explicit GeneratorStateScope(const std::array<uint64_t, 2>& state)
      : prev_(default_generator().get_state()) {
    default_generator().set_state(state);
  }
  ~GeneratorStateScope() { default_generator().set_state(prev_); }

 private:
  std::array<uint64_t, 2> prev_;
};

}  // namespace

TensorList checkpoint(const CheckpointFn& fn, const TensorList& inputs) {
  if (!needs_grad(inputs)) return fn(inputs);
  const std::array<uint64_t, 2> rng = default_generator().get_state();
  const tessera::detail::AutocastState autocast = tessera::detail::autocast_state();
  TensorList outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  auto recompute = [fn, rng, autocast, n = inputs.size()](BackwardContext& ctx,
                                                          const TensorList& grads) {
    TensorList detached(n);
    for (size_t i = 0; i < n; ++i) {
      detached[i] = ctx.saved(i).detach();
      if (ctx.needs_input_grad(i)) detached[i].requires_grad_(true);
    }
    TensorList recomputed;
    {
      GeneratorStateScope same_random_numbers(rng);
      tessera::detail::AutocastStateScope same_precision(autocast);
      GradModeGuard grad_mode(true);
      recomputed = fn(detached);
    }
    TensorList roots, root_grads;
    for (size_t k = 0; k < recomputed.size() && k < grads.size(); ++k) {
      if (!grads[k].defined() || !recomputed[k].requires_grad()) continue;
      roots.push_back(recomputed[k]);
      root_grads.push_back(grads[k]);
    }
    if (!roots.empty()) backward(roots, root_grads);
    TensorList input_grads(n);
    for (size_t i = 0; i < n; ++i)
      if (ctx.needs_input_grad(i)) input_grads[i] = detached[i].grad();
    return input_grads;
  };
  record("CheckpointBackward", inputs, outputs, inputs, std::move(recompute));
  return outputs;
}

}  // namespace tessera::autograd

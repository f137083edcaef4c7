// dropout (a composite of public ops, whose gradients it takes) and swiglu (one elementwise pass
// forward, one kernel backward; the composite gradient under create_graph).
#include <utility>

#include "backend/common/nn_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

// swiglu's gradients (dgate, dup) at the output's shape in public ops, which differentiate again
// (create_graph): with s = sigmoid(g), dgate = dout u s (1 + g (1 - s)), dup = dout g s.
TensorList swiglu_grad_composite(const Tensor& dout, const Tensor& g, const Tensor& u) {
  Tensor s = sigmoid(g);
  return {dout * u * s * (1.0 + g * (1.0 - s)), dout * g * s};
}

// The same from one kernel pass (broadcast inputs expanded to the output's shape first).
TensorList swiglu_grad_fused(const Tensor& dout, const Tensor& g, const Tensor& u) {
  const Shape& shape = dout.sizes();
  auto full = [&](const Tensor& t) { return contiguous(t.sizes() == shape ? t : t.expand(shape)); };
  const Tensor x = full(g), y = full(u), d = full(cast(dout, g.dtype()));
  TensorList r{empty(shape, options_of(x)), empty(shape, options_of(x))};
  call_kernel<swiglu_backward_kernel>(x.device(), r[0], r[1], d, x, y);
  return r;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  TESSERA_OP_SCOPE("dropout", x);
  TESSERA_CHECK(p >= 0.0 && p <= 1.0, ValueError, "[dropout] expected p in [0, 1], got ", p);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError,
                "[dropout] expected a floating-point tensor, got ", x.dtype());
  if (!training || p == 0.0 || x.numel() == 0) return x;
  if (p == 1.0) return x * zeros({}, TensorOptions(x.dtype()).with_device(x.device()));
  // One Philox draw per element decides keep (probability 1 - p, compared in double so the mask
  // does not depend on x's dtype); 16-bit inputs are scaled in float and rounded once.
  const DType ct = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor scaled_keep;
  {
    autograd::NoGradGuard ng;
    Tensor keep =
        bernoulli(full(x.sizes(), 1.0 - p, TensorOptions(kFloat64).with_device(x.device())), gen);
    scaled_keep = cast_raw(keep, ct) * (1.0 / (1.0 - p));
  }
  return cast(cast(x, ct) * scaled_keep, x.dtype());
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  TESSERA_OP_SCOPE("swiglu", gate, up);
  TESSERA_CHECK(is_floating(gate.dtype()) && is_floating(up.dtype()), TypeError,
                "[swiglu] expected floating-point gate and up, got ", gate.dtype(), " and ",
                up.dtype());
  broadcast_shapes(gate.sizes(), up.sizes(), "swiglu");
  // One elementwise pass in the promoted dtype (opmath inside), broadcasting as mul does.
  const DType dt = result_type(gate, up);
  const Tensor g = cast_raw(gate, dt), u = cast_raw(up, dt);
  Tensor out = run_elementwise<fn::SwigluFn>("swiglu", dt, {g, u});
  if (needs_grad({gate, up})) {
    record("SwigluBackward", {gate, up}, {out}, {g, u},
           [gate_meta = std::pair(gate.sizes(), gate.dtype()),
            up_meta = std::pair(up.sizes(), up.dtype())](BackwardContext& ctx,
                                                         const TensorList& grads) {
             const Tensor g = ctx.saved(0), u = ctx.saved(1);
             TensorList d = autograd::GradMode::is_enabled() ? swiglu_grad_composite(grads[0], g, u)
                                                             : swiglu_grad_fused(grads[0], g, u);
             TensorList r(2);
             if (ctx.needs_input_grad(0))
               r[0] = reduce_grad(d[0], gate_meta.first, gate_meta.second);
             if (ctx.needs_input_grad(1)) r[1] = reduce_grad(d[1], up_meta.first, up_meta.second);
             return r;
           });
  }
  return out;
}

TESSERA_REGISTER_OPS({"dropout", "nn", kFloatingTypes, true},
                     {"swiglu", "nn", kFloatingTypes, true});

}  // namespace tessera

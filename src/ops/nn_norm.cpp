// layer_norm, rms_norm and the fused residual add_rms_norm. Forward and backward run fused
// kernels over rows [rows, n]; when a graph of the gradient is being built (create_graph) the
// backward is the same math in public ops, so it differentiates again.
#include "backend/common/nn_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

// Float statistics for 16-bit inputs, double for float64.
DType stat_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

TensorOptions like(const Tensor& t, DType dtype) {
  return TensorOptions(dtype).with_device(t.device());
}

void check_param(const std::optional<Tensor>& p, const Tensor& x, const Shape& shape,
                 const char* what, std::string_view op) {
  if (!p) return;
  TESSERA_CHECK(p->sizes() == shape, ValueError, "[", op, "] expected ", what, " of shape ", shape,
                ", got ", p->sizes());
  TESSERA_CHECK(p->dtype() == x.dtype(), TypeError, "[", op, "] expected ", what, " of dtype ",
                x.dtype(), " (the input's), got ", p->dtype());
  TESSERA_CHECK(p->device() == x.device(), ValueError, "[", op, "] expected ", what, " on ",
                x.device().str(), ", got ", p->device().str());
}

// x as a contiguous [rows, n] tensor (differentiable: copies and views are recorded).
Tensor as_rows(const Tensor& x, int64_t n) {
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  return reshape(contiguous(x), {rows, n});
}

Tensor flat_param(const std::optional<Tensor>& p) {
  return p ? reshape(contiguous(*p), {p->numel()}) : Tensor();
}

// RMS-norm input gradient in public ops: rstd (gw - xhat mean(gw xhat)), xhat = h rstd.
Tensor rms_grad_composite(const Tensor& g, const Tensor& h, const Tensor& w, double eps) {
  Tensor rstd = rsqrt(mean(h * h, {1}, true) + eps);
  Tensor xhat = h * rstd;
  Tensor gw = w.defined() ? g * w : g;
  return rstd * (gw - xhat * mean(gw * xhat, {1}, true));
}

// Gradients (dh, dweight) of y = rms_norm(h) * weight for upstream dy, plus an extra dh_extra.
TensorList rms_backward(const Tensor& dy, const Tensor& dh_extra, const Tensor& h,
                        const Tensor& rstd, const Tensor& w, double eps, bool want_dx,
                        bool want_dw) {
  if (autograd::GradMode::is_enabled()) {
    TensorList r(2);
    if (want_dx) {
      r[0] = rms_grad_composite(dy, h, w, eps);
      if (dh_extra.defined()) r[0] = r[0] + dh_extra;
    }
    if (want_dw) r[1] = sum(dy * (h * rsqrt(mean(h * h, {1}, true) + eps)), {0});
    return r;
  }
  Tensor g = contiguous(cast(dy, h.dtype()));
  Tensor dx = want_dx ? empty(h.sizes(), like(h, h.dtype())) : Tensor();
  Tensor dw = want_dw ? empty({h.size(1)}, like(h, h.dtype())) : Tensor();
  Tensor extra = want_dx && dh_extra.defined() ? contiguous(cast(dh_extra, h.dtype())) : Tensor();
  if (h.numel() > 0 || dw.defined())
    call_kernel<rms_norm_backward_kernel>(h.device(), dx, dw, g, extra, h, rstd, w);
  return {dx, dw};
}

}  // namespace

Tensor layer_norm(const Tensor& x_, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight_, const std::optional<Tensor>& bias_,
                  double eps) {
  TESSERA_OP_SCOPE("layer_norm", x_, weight_, bias_);
  const Tensor& x = op_scope.arg(0);
  const std::optional<Tensor> weight = op_scope.optional_arg(1);
  const std::optional<Tensor> bias = op_scope.optional_arg(2);
  constexpr const char* op = "layer_norm";
  TESSERA_CHECK(is_floating(x.dtype()), TypeError, "[", op,
                "] expected a floating-point input, got ", x.dtype());
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool trailing = k >= 1 && k <= x.dim();
  for (int64_t i = 0; trailing && i < k; ++i)
    trailing = x.size(x.dim() - k + i) == normalized_shape[i];
  TESSERA_CHECK(trailing, ValueError, "[", op, "] expected an input whose trailing dims are ",
                normalized_shape, ", got shape ", x.sizes());
  check_param(weight, x, normalized_shape, "weight", op);
  check_param(bias, x, normalized_shape, "bias", op);
  const int64_t n = shape_numel(normalized_shape);
  Tensor x2 = as_rows(x, n);
  Tensor w = flat_param(weight), b = flat_param(bias);
  const int64_t rows = x2.size(0);
  Tensor y = empty(x2.sizes(), like(x, x.dtype()));
  Tensor mu = empty({rows}, like(x, stat_dtype(x.dtype())));
  Tensor rstd = empty({rows}, like(x, stat_dtype(x.dtype())));
  if (x2.numel() > 0) call_kernel<layer_norm_kernel>(x.device(), y, mu, rstd, x2, w, b, eps);
  if (needs_grad({x2, w, b})) {
    record("LayerNormBackward", {x2, w, b}, {y}, {x2, mu, rstd, w},
           [eps](BackwardContext& ctx, const TensorList& g) {
             Tensor xs = ctx.saved(0), ws = ctx.saved(3);
             TensorList r(3);
             if (autograd::GradMode::is_enabled()) {
               Tensor xc = xs - mean(xs, {1}, true);
               Tensor xhat = xc * rsqrt(mean(xc * xc, {1}, true) + eps);
               Tensor gw = ws.defined() ? g[0] * ws : g[0];
               if (ctx.needs_input_grad(0))
                 r[0] = rsqrt(mean(xc * xc, {1}, true) + eps) *
                        (gw - mean(gw, {1}, true) - xhat * mean(gw * xhat, {1}, true));
               if (ctx.needs_input_grad(1)) r[1] = sum(g[0] * xhat, {0});
               if (ctx.needs_input_grad(2)) r[2] = sum(g[0], {0});
               return r;
             }
             const int64_t n = xs.size(1);
             TensorOptions o = like(xs, xs.dtype());
             if (ctx.needs_input_grad(0)) r[0] = empty(xs.sizes(), o);
             if (ctx.needs_input_grad(1)) r[1] = empty({n}, o);
             if (ctx.needs_input_grad(2)) r[2] = empty({n}, o);
             call_kernel<layer_norm_backward_kernel>(xs.device(), r[0], r[1], r[2],
                                                     contiguous(cast(g[0], xs.dtype())), xs,
                                                     ctx.saved(1), ctx.saved(2), ws);
             return r;
           });
  }
  return reshape(y, x.sizes());
}

Tensor rms_norm(const Tensor& x_, const std::optional<Tensor>& weight_, double eps) {
  TESSERA_OP_SCOPE("rms_norm", x_, weight_);
  const Tensor& x = op_scope.arg(0);
  const std::optional<Tensor> weight = op_scope.optional_arg(1);
  constexpr const char* op = "rms_norm";
  TESSERA_CHECK(is_floating(x.dtype()), TypeError, "[", op,
                "] expected a floating-point input, got ", x.dtype());
  TESSERA_CHECK(x.dim() >= 1, ValueError, "[", op, "] expected an input with at least 1 dim, got ",
                x.sizes());
  const int64_t n = x.size(-1);
  check_param(weight, x, {n}, "weight", op);
  Tensor x2 = as_rows(x, n);
  Tensor w = flat_param(weight);
  Tensor y = empty(x2.sizes(), like(x, x.dtype()));
  Tensor rstd = empty({x2.size(0)}, like(x, stat_dtype(x.dtype())));
  if (x2.numel() > 0)
    call_kernel<rms_norm_kernel>(x.device(), y, rstd, Tensor(), x2, Tensor(), w, eps);
  if (needs_grad({x2, w})) {
    record("RmsNormBackward", {x2, w}, {y}, {x2, rstd, w},
           [eps](BackwardContext& ctx, const TensorList& g) {
             return rms_backward(g[0], Tensor(), ctx.saved(0), ctx.saved(1), ctx.saved(2), eps,
                                 ctx.needs_input_grad(0), ctx.needs_input_grad(1));
           });
  }
  return reshape(y, x.sizes());
}

std::tuple<Tensor, Tensor> add_rms_norm(const Tensor& x_, const Tensor& residual_,
                                        const std::optional<Tensor>& weight_, double eps) {
  TESSERA_OP_SCOPE("add_rms_norm", x_, residual_, weight_);
  const Tensor& x = op_scope.arg(0);
  const Tensor& residual = op_scope.arg(1);
  const std::optional<Tensor> weight = op_scope.optional_arg(2);
  constexpr const char* op = "add_rms_norm";
  TESSERA_CHECK(is_floating(x.dtype()) && residual.dtype() == x.dtype(), TypeError, "[", op,
                "] expected x and residual of one floating dtype, got ", x.dtype(), " and ",
                residual.dtype());
  TESSERA_CHECK(x.dim() >= 1 && x.sizes() == residual.sizes(), ValueError, "[", op,
                "] expected x and residual of one shape (at least 1-d), got ", x.sizes(), " and ",
                residual.sizes());
  TESSERA_CHECK(x.device() == residual.device(), ValueError, "[", op,
                "] expected x and residual on one device, got ", x.device().str(), " and ",
                residual.device().str());
  const int64_t n = x.size(-1);
  check_param(weight, x, {n}, "weight", op);
  Tensor x2 = as_rows(x, n), r2 = as_rows(residual, n);
  Tensor w = flat_param(weight);
  Tensor h = empty(x2.sizes(), like(x, x.dtype()));
  Tensor y = empty(x2.sizes(), like(x, x.dtype()));
  Tensor rstd = empty({x2.size(0)}, like(x, stat_dtype(x.dtype())));
  if (x2.numel() > 0) call_kernel<rms_norm_kernel>(x.device(), y, rstd, h, x2, r2, w, eps);
  if (needs_grad({x2, r2, w})) {
    record("AddRmsNormBackward", {x2, r2, w}, {h, y}, {h, rstd, w},
           [eps](BackwardContext& ctx, const TensorList& g) {
             // d(x) = d(residual) = dh + rms_norm'(h) dy.
             const bool want_dx = ctx.needs_input_grad(0) || ctx.needs_input_grad(1);
             TensorList r = rms_backward(g[1], g[0], ctx.saved(0), ctx.saved(1), ctx.saved(2), eps,
                                         want_dx, ctx.needs_input_grad(2));
             return TensorList{r[0], r[0], r[1]};
           });
  }
  return {reshape(h, x.sizes()), reshape(y, x.sizes())};
}

// Normalisations compute in float32 under autocast.
TESSERA_REGISTER_OPS({"layer_norm", "nn", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"rms_norm", "nn", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"add_rms_norm", "nn", kFloatingTypes, true, CastPolicy::kFloat32});

}  // namespace tessera

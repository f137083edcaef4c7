// Losses. cross_entropy with class indices runs one fused kernel (log-softmax, pick, label
// smoothing and class weights per row; lse saved for backward), nll_loss the same kernel on
// log-probabilities; the backward is a kernel, or public ops under create_graph. Probability
// targets and mse_loss are composites.
#include <limits>

#include "backend/common/nn_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

Reduction reduction_from_string(std::string_view s, std::string_view op) {
  if (s == "none") return Reduction::None;
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  throw ValueError(
      detail::str("[", op, "] expected reduction 'none', 'mean' or 'sum', got '", s, "'"));
}

namespace {

DType stat_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

// Input [C], [N, C] or [N, C, d1...] as a contiguous [M, C] (class dim last; differentiable).
Tensor classes_last(const Tensor& x) {
  const int64_t C = x.dim() == 1 ? x.size(0) : x.size(1);
  if (x.dim() <= 2) return contiguous(reshape(x, {-1, C}));
  Shape perm{0};
  for (int64_t d = 2; d < x.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return contiguous(reshape(permute(x, perm), {-1, C}));
}

// The class weight as a [C] tensor of dtype (not differentiable, as in torch).
Tensor class_weight(const std::optional<Tensor>& weight, int64_t C, DType dtype,
                    std::string_view op) {
  if (!weight) return Tensor();
  TESSERA_CHECK(weight->dim() == 1 && weight->size(0) == C, ValueError, "[", op,
                "] expected a class weight of shape [", C, "], got ", weight->sizes());
  TESSERA_CHECK(is_floating(weight->dtype()), TypeError, "[", op,
                "] expected a floating-point class weight, got ", weight->dtype());
  return contiguous(cast_raw(weight->detach(), dtype));
}

// Gradient of the class loss w.r.t. its [M, C] input in public ops (used under create_graph).
Tensor class_loss_grad_composite(const Tensor& x, const Tensor& target, const Tensor& weight,
                                 const Tensor& scale, const ClassLossParams& p) {
  const int64_t C = x.size(1);
  const DType dt = x.dtype();
  Tensor valid = unsqueeze(target != wrap_scalar(p.ignore_index, target.device()), 1);
  Tensor onehot = cast(unsqueeze(target, 1) == unsqueeze(arange(C).to(x.device()), 0), dt);
  Tensor w = weight.defined() ? weight : ones({C}, TensorOptions(dt).with_device(x.device()));
  Tensor hard = sum(onehot * w, {1}, true) * (1.0 - p.label_smoothing);  // (1 - eps) w[t]
  const double smooth = p.label_smoothing / static_cast<double>(C);
  Tensor d;
  if (p.from_logits) {
    Tensor prob = softmax(x, 1);
    d = hard * (prob - onehot) + (prob * sum(w) - w) * smooth;
  } else {
    d = neg(hard * onehot + w * smooth);
  }
  return where(valid, d * scale, zeros({}, TensorOptions(dt).with_device(x.device())));
}

// Gradient of the class loss w.r.t. its [M, C] input x for the upstream gradient g (of the
// reduced output); lse, target, weight and denom (the mean's divisor) are saved from the forward.
Tensor class_loss_backward(const Tensor& g, const Tensor& x, const Tensor& lse,
                           const Tensor& target, const Tensor& weight, const Tensor& denom,
                           Reduction reduction, const ClassLossParams& p) {
  if (autograd::GradMode::is_enabled()) {
    // create_graph: the same math in public ops, so it differentiates again.
    Tensor s = cast(g, x.dtype());
    if (reduction == Reduction::None) s = unsqueeze(s, 1);
    if (reduction == Reduction::Mean) s = s / cast(denom, x.dtype());
    return class_loss_grad_composite(x, target, weight, s, p);
  }
  // The kernel takes the upstream scale of every row, [M] in the statistics dtype.
  Tensor s = cast(g, lse.dtype());
  if (reduction == Reduction::Mean) s = s / denom;
  if (reduction != Reduction::None) s = expand(s, {x.size(0)});
  Tensor dx = empty(x.sizes(), TensorOptions(x.dtype()).with_device(x.device()));
  call_kernel<class_loss_backward_kernel>(x.device(), dx, contiguous(s), x, lse, target, weight, p);
  return dx;
}

// The loss is returned in out_dtype: the input's, or float32 when autocast has the op widen a
// 16-bit input itself (the kernel reduces in float32 either way).
Tensor class_loss(const Tensor& input, const Tensor& target, std::optional<int64_t> ignore_index,
                  double label_smoothing, Reduction reduction, const std::optional<Tensor>& weight,
                  bool from_logits, std::string_view op, DType out_dtype) {
  TESSERA_CHECK(is_floating(input.dtype()), TypeError, "[", op,
                "] expected a floating-point input, got ", input.dtype());
  TESSERA_CHECK(input.dim() >= 1, ValueError, "[", op,
                "] expected input [C], [N, C] or [N, C, d1, ...], got shape ", input.sizes());
  TESSERA_CHECK(target.dtype() == kInt64, TypeError, "[", op,
                "] expected int64 class indices as target, got ", target.dtype());
  const int64_t cdim = input.dim() == 1 ? 0 : 1;
  const int64_t C = input.size(cdim);
  Shape target_shape = input.sizes();
  target_shape.erase(target_shape.begin() + cdim);
  TESSERA_CHECK(target.sizes() == target_shape, ValueError, "[", op, "] expected target of shape ",
                target_shape, " for input of shape ", input.sizes(), ", got ", target.sizes());
  TESSERA_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError, "[", op,
                "] expected label_smoothing in [0, 1], got ", label_smoothing);
  TESSERA_CHECK(target.device() == input.device(), ValueError, "[", op, "] expected target on ",
                input.device().str(), ", got ", target.device().str());
  ClassLossParams p;
  if (ignore_index) p.ignore_index = *ignore_index;
  p.label_smoothing = label_smoothing;
  p.from_logits = from_logits;
  Tensor t = contiguous(reshape(target.detach(), {-1}));
  {
    autograd::NoGradGuard ng;
    Tensor bad = logical_and(logical_or(t < 0, t >= C), t != wrap_scalar(p.ignore_index, t.device()));
    if (t.numel() > 0 && any(bad).item<bool>()) {
      int64_t v = amax(where(bad, t, zeros_like(t) - (int64_t{1} << 62))).item<int64_t>();
      throw IndexError(detail::str("[", op, "] expected target class indices in [0, ", C, ")",
                                   ignore_index ? " or ignore_index" : "", ", got ", v));
    }
  }
  Tensor w = class_weight(weight, C, input.dtype(), op);
  Tensor x = classes_last(input);
  const int64_t M = x.size(0);
  const DType at = stat_dtype(input.dtype());
  TensorOptions ao = TensorOptions(at).with_device(input.device());
  Tensor loss_rows = empty({M}, ao), lse = empty({M}, ao), row_weight = empty({M}, ao);
  call_kernel<class_loss_kernel>(input.device(), loss_rows, lse, row_weight, x.detach(), t, w, p);
  Tensor out, denom;
  {
    autograd::NoGradGuard ng;
    switch (reduction) {
      case Reduction::None:
        out = cast_raw(loss_rows, out_dtype);
        break;
      case Reduction::Sum:
        out = cast_raw(sum(loss_rows), out_dtype);
        break;
      case Reduction::Mean:
        // Weighted mean over the non-ignored targets; 0 / 0 = nan when all are ignored.
        denom = sum(row_weight);
        out = cast_raw(sum(loss_rows) / denom, out_dtype);
        break;
    }
  }
  if (needs_grad({x})) {
    record(from_logits ? "CrossEntropyBackward" : "NllLossBackward", {x}, {out},
           {x, lse, t, w, denom}, [p, reduction](BackwardContext& ctx, const TensorList& g) {
             return TensorList{class_loss_backward(g[0], ctx.saved(0), ctx.saved(1), ctx.saved(2),
                                                   ctx.saved(3), ctx.saved(4), reduction, p)};
           });
  }
  return reduction == Reduction::None ? reshape(out, target_shape) : out;
}

// cross_entropy with class probabilities as target (same shape as the input), as in torch:
// -sum_c w[c] target'[c] log_softmax(x)[c] with target' = (1 - eps) target + eps / C; the mean
// divides by the number of samples, not by weights.
Tensor cross_entropy_probs(const Tensor& logits, const Tensor& target,
                           std::optional<int64_t> ignore_index, double label_smoothing,
                           Reduction reduction, const std::optional<Tensor>& weight) {
  constexpr const char* op = "cross_entropy";
  TESSERA_CHECK(is_floating(logits.dtype()), TypeError, "[", op,
                "] expected floating-point logits, got ", logits.dtype());
  TESSERA_CHECK(logits.dim() >= 1 && target.sizes() == logits.sizes(), ValueError, "[", op,
                "] expected probability targets of the logits' shape ", logits.sizes(), ", got ",
                target.sizes());
  TESSERA_CHECK(!ignore_index || *ignore_index < 0, ValueError, "[", op,
                "] expected no ignore_index with probability targets, got ", *ignore_index);
  TESSERA_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError, "[", op,
                "] expected label_smoothing in [0, 1], got ", label_smoothing);
  const int64_t cdim = logits.dim() == 1 ? 0 : 1;
  const int64_t C = logits.size(cdim);
  Tensor tgt = cast(target, logits.dtype());
  if (label_smoothing > 0) tgt = tgt * (1.0 - label_smoothing) + label_smoothing / C;
  Tensor prod = log_softmax(logits, cdim) * tgt;
  if (Tensor w = class_weight(weight, C, logits.dtype(), op); w.defined()) {
    Shape wshape(logits.dim() - cdim, 1);
    wshape[0] = C;
    prod = prod * reshape(w, wshape);
  }
  Tensor loss = neg(sum(prod, {cdim}));
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      return sum(loss) / static_cast<double>(logits.numel() / std::max<int64_t>(C, 1));
  }
  return loss;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_, const Tensor& target_,
                     std::optional<int64_t> ignore_index, double label_smoothing,
                     Reduction reduction, const std::optional<Tensor>& weight_) {
  TESSERA_OP_SCOPE("cross_entropy", logits_, target_, weight_);
  const Tensor& logits = op_scope.arg(0);
  const Tensor& target = op_scope.arg(1);
  const std::optional<Tensor> weight = op_scope.optional_arg(2);
  if (is_floating(target.dtype()))
    return cross_entropy_probs(logits, target, ignore_index, label_smoothing, reduction, weight);
  return class_loss(logits, target, ignore_index, label_smoothing, reduction, weight, true,
                    "cross_entropy", op_scope.widen_to_float32() ? kFloat32 : logits.dtype());
}

Tensor nll_loss(const Tensor& log_probs_, const Tensor& target_,
                std::optional<int64_t> ignore_index, Reduction reduction,
                const std::optional<Tensor>& weight_) {
  TESSERA_OP_SCOPE("nll_loss", log_probs_, target_, weight_);
  return class_loss(op_scope.arg(0), op_scope.arg(1), ignore_index, 0.0, reduction,
                    op_scope.optional_arg(2), false, "nll_loss", op_scope.arg(0).dtype());
}

Tensor mse_loss(const Tensor& input_, const Tensor& target_, Reduction reduction) {
  TESSERA_OP_SCOPE("mse_loss", input_, target_);
  const Tensor& input = op_scope.arg(0);
  const Tensor& target = op_scope.arg(1);
  TESSERA_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), TypeError,
                "[mse_loss] expected floating-point input and target, got ", input.dtype(), " and ",
                target.dtype());
  broadcast_shapes(input.sizes(), target.sizes(), "mse_loss");
  Tensor d = input - target;
  Tensor sq = d * d;
  switch (reduction) {
    case Reduction::None:
      return sq;
    case Reduction::Sum:
      return sum(sq);
    case Reduction::Mean:
      return mean(sq);
  }
  return sq;
}

// Losses compute in float32 under autocast; cross_entropy reads 16-bit logits without a copy.
TESSERA_REGISTER_OPS({"cross_entropy", "nn", kFloatingTypes, true, CastPolicy::kFloat32Widening},
                     {"nll_loss", "nn", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"mse_loss", "nn", kFloatingTypes, true, CastPolicy::kFloat32});

}  // namespace tessera

// softmax / log_softmax (fused kernels; the backward is a kernel too, or composite public ops
// when a graph of the gradient is being built), the safe softmax attention uses and
// causal_softmax.
#include <cmath>
#include <limits>

#include "backend/common/nn_kernels.h"
#include "ops/attention.h"
#include "ops/op_utils.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/index.h"
#include "tessera/ops/infinicore.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

// Softmax of x along dim via the [outer, n, inner] kernel; `op` names the public op for errors.
Tensor softmax_impl(const Tensor& x, int64_t dim, SoftmaxKind kind, std::string_view op) {
  TESSERA_CHECK(is_floating(x.dtype()), TypeError, "[", op,
                "] expected a floating-point tensor, got ", x.dtype());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) (i < d ? outer : i == d ? n : inner) *= x.size(i);
  Tensor in = contiguous(x.detach());
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype()).with_device(x.device()));
  if (out.numel() > 0) call_kernel<softmax_kernel>(x.device(), out, in, outer, n, inner, kind);
  if (needs_grad({x})) {
    const Shape red = x.dim() == 0 ? Shape{} : Shape{d};
    record(kind == SoftmaxKind::LogSoftmax ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, {out},
           {out}, [=](BackwardContext& ctx, const TensorList& g) {
             Tensor y = ctx.saved(0);
             Tensor go = cast(g[0], y.dtype());
             if (autograd::GradMode::is_enabled()) {
               // create_graph: the same formulas with public ops, so they differentiate again.
               if (kind == SoftmaxKind::LogSoftmax)
                 return TensorList{go - exp(y) * sum(go, red, true)};
               return TensorList{y * (go - sum(go * y, red, true))};
             }
             Tensor gi = empty(y.sizes(), TensorOptions(y.dtype()).with_device(y.device()));
             if (gi.numel() > 0)
               call_kernel<softmax_backward_kernel>(y.device(), gi, contiguous(go), y, outer, n,
                                                    inner, kind);
             return TensorList{gi};
           });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x_, int64_t dim) {
  TESSERA_OP_SCOPE("softmax", x_);
  return softmax_impl(op_scope.arg(0), dim, SoftmaxKind::Softmax, "softmax");
}

Tensor log_softmax(const Tensor& x_, int64_t dim) {
  TESSERA_OP_SCOPE("log_softmax", x_);
  return softmax_impl(op_scope.arg(0), dim, SoftmaxKind::LogSoftmax, "log_softmax");
}

Tensor detail::safe_softmax(const Tensor& x, std::string_view op) {
  return softmax_impl(x, -1, SoftmaxKind::SafeSoftmax, op);
}

// InfiniCore's causal_softmax: the causal mask aligned bottom-right, as in a decode/prefill step.
Tensor causal_softmax(const Tensor& x_) {
  TESSERA_OP_SCOPE("causal_softmax", x_);
  const Tensor& x = op_scope.arg(0);
  TESSERA_CHECK(is_floating(x.dtype()), TypeError,
                "[causal_softmax] expected a floating-point tensor, got ", x.dtype());
  TESSERA_CHECK(x.dim() >= 2 && x.size(-1) >= x.size(-2), ValueError,
                "[causal_softmax] expected scores [..., T, S] with S >= T, got shape ", x.sizes());
  const int64_t T = x.size(-2), S = x.size(-1);
  // Query i sees keys j <= i + S - T: mask the triangle strictly above that diagonal.
  Tensor hidden = triu(ones({T, S}, TensorOptions(kBool).with_device(x.device())), S - T + 1);
  return softmax(masked_fill(x, hidden, -std::numeric_limits<double>::infinity()), -1);
}

TESSERA_REGISTER_OPS({"softmax", "nn", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"causal_softmax", "nn", kFloatingTypes, true, CastPolicy::kFloat32},
                     {"log_softmax", "nn", kFloatingTypes, true, CastPolicy::kFloat32});

}  // namespace tessera

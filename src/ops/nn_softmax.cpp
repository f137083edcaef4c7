// softmax / log_softmax (fused kernels; the backward is a kernel too, or composite public ops
// when a graph of the gradient is being built) and scaled_dot_product_attention, a composite of
// two matmuls around a masked softmax.
#include <cmath>
#include <limits>

#include "backend/common/nn_kernels.h"
#include "ops/op_utils.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/index.h"
#include "tessera/ops/infinicore.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/registry.h"
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

constexpr const char* kSdpa = "scaled_dot_product_attention";

// The additive form of an attention mask: bool (true = keep) becomes 0 / -inf.
Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kBool) return cast(mask, dtype);
  TensorOptions o = TensorOptions(dtype).with_device(mask.device());
  return where(mask, zeros({}, o), full({}, -std::numeric_limits<double>::infinity(), o));
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

Tensor scaled_dot_product_attention(const Tensor& q_, const Tensor& k_, const Tensor& v_,
                                    const std::optional<Tensor>& attn_mask_, bool is_causal,
                                    std::optional<double> scale) {
  TESSERA_OP_SCOPE(kSdpa, q_, k_, v_, attn_mask_);
  const Tensor& q = op_scope.arg(0);
  const Tensor& k = op_scope.arg(1);
  const Tensor& v = op_scope.arg(2);
  const std::optional<Tensor> attn_mask = op_scope.optional_arg(3);
  TESSERA_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, ValueError, "[", kSdpa,
                "] expected 4-d q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D], got shapes ", q.sizes(),
                ", ", k.sizes(), " and ", v.sizes());
  TESSERA_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
                TypeError, "[", kSdpa, "] expected q, k and v of one floating dtype, got ",
                q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  TESSERA_CHECK(q.device() == k.device() && q.device() == v.device(), ValueError, "[", kSdpa,
                "] expected q, k and v on one device, got ", q.device().str(), ", ",
                k.device().str(), " and ", v.device().str());
  const int64_t B = q.size(0), Hq = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), Dv = v.size(3);
  TESSERA_CHECK(
      k.size(0) == B && v.size(0) == B && v.size(1) == Hkv && v.size(2) == Tk && k.size(3) == D,
      ValueError, "[", kSdpa,
      "] expected k [B, Hkv, Tk, D] and v [B, Hkv, Tk, Dv] matching q [B, Hq, Tq, D], "
      "got shapes ",
      q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  TESSERA_CHECK(Hkv > 0 && Hq % Hkv == 0, ValueError, "[", kSdpa, "] expected the query heads (",
                Hq, ") to be a multiple of the key/value heads (", Hkv, ")");
  const Shape scores_shape{B, Hq, Tq, Tk};
  if (attn_mask) {
    TESSERA_CHECK(!is_causal, ValueError, "[", kSdpa,
                  "] expected either attn_mask or is_causal, got both");
    TESSERA_CHECK(attn_mask->dtype() == kBool || is_floating(attn_mask->dtype()), TypeError, "[",
                  kSdpa, "] expected a bool or floating attn_mask, got ", attn_mask->dtype());
    const Shape& ms = attn_mask->sizes();
    bool fits = ms.size() <= scores_shape.size();
    for (size_t i = 0; fits && i < ms.size(); ++i) {
      const int64_t want = scores_shape[scores_shape.size() - ms.size() + i];
      fits = ms[i] == want || ms[i] == 1;
    }
    TESSERA_CHECK(fits, ValueError, "[", kSdpa, "] expected attn_mask broadcastable to ",
                  scores_shape, ", got shape ", ms);
  }
  // 16-bit inputs compute in float32 (as torch's math path) and round the output once.
  const DType ct = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  const int64_t G = Hq / Hkv;
  // GQA without copying KV heads: the G query heads sharing a KV head are stacked along the
  // row dim, q [B, Hkv, G*Tq, D] against k [B, Hkv, Tk, D].
  Tensor qs = cast(q, ct) * sc;
  Tensor s = reshape(matmul(reshape(qs, {B, Hkv, G * Tq, D}), cast(k, ct).mT()), scores_shape);
  if (attn_mask) s = s + additive_mask(*attn_mask, ct);
  if (is_causal) {
    // Top-left aligned: query i sees keys j <= i.
    Tensor keep = unsqueeze(arange(Tq).to(q.device()), 1) >= unsqueeze(arange(Tk).to(q.device()), 0);
    s = s + additive_mask(keep, ct);
  }
  Tensor p = softmax_impl(s, -1, SoftmaxKind::SafeSoftmax, kSdpa);
  Tensor o = matmul(reshape(p, {B, Hkv, G * Tq, Tk}), cast(v, ct));
  return cast(reshape(o, {B, Hq, Tq, Dv}), q.dtype());
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
                     {"log_softmax", "nn", kFloatingTypes, true, CastPolicy::kFloat32},
                     {kSdpa, "nn", kFloatingTypes, true, CastPolicy::kLowerPrecision});

}  // namespace tessera

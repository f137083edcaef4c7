// scaled_dot_product_attention. The composite (two matmuls around a masked safe softmax, in
// float32 for 16-bit inputs) runs on every device and dtype and is the oracle; without attn_mask,
// 16-bit q, k, v on CUDA and float32 ones on the CPU take the fused flash forward and backward
// instead, which never materialise the [B, H, Tq, Tk] scores.
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/common/nn_kernels.h"
#include "ops/attention.h"
#include "ops/op_utils.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

constexpr const char* kSdpa = "scaled_dot_product_attention";

// The additive form of an attention mask: bool (true = keep) becomes 0 / -inf.
Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (mask.dtype() != kBool) return cast(mask, dtype);
  TensorOptions o = TensorOptions(dtype).with_device(mask.device());
  return where(mask, zeros({}, o), full({}, -std::numeric_limits<double>::infinity(), o));
}

// p = safe_softmax(sc q k^T + mask) in dtype ct as [B, Hkv, G Tq, Tk]: the G query heads sharing
// a KV head are stacked along the rows (q [B, Hkv, G Tq, D] against k), so no KV head is copied.
Tensor attention_probs(const Tensor& q, const Tensor& k, const std::optional<Tensor>& attn_mask,
                       bool is_causal, double sc, DType ct) {
  const int64_t B = q.size(0), Hq = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), G = Hq / Hkv;
  Tensor qs = reshape(cast(q, ct) * sc, {B, Hkv, G * Tq, D});
  Tensor s = reshape(matmul(qs, cast(k, ct).mT()), {B, Hq, Tq, Tk});
  if (attn_mask) s = s + additive_mask(*attn_mask, ct);
  if (is_causal) {
    // Top-left aligned: query i sees keys j <= i.
    Tensor keep =
        unsqueeze(arange(Tq).to(q.device()), 1) >= unsqueeze(arange(Tk).to(q.device()), 0);
    s = s + additive_mask(keep, ct);
  }
  return reshape(safe_softmax(s, kSdpa), {B, Hkv, G * Tq, Tk});
}

Tensor composite_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::optional<Tensor>& attn_mask, bool is_causal, double sc) {
  // 16-bit inputs compute in float32 (as torch's math path) and round the output once.
  const DType ct = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor p = attention_probs(q, k, attn_mask, is_causal, sc, ct);
  Tensor o = matmul(p, cast(v, ct));
  return cast(reshape(o, {q.size(0), q.size(1), q.size(2), v.size(3)}), q.dtype());
}

// The flash path's gradient written with public ops, so it differentiates again (create_graph).
// With p the probabilities, go = dL/dout and dp = go v^T:
//   ds = p (dp - rowsum(dp p)), dq = sc ds k, dk = sc ds^T q, dv = p^T go.
TensorList composite_attention_backward(const Tensor& go, const Tensor& q, const Tensor& k,
                                        const Tensor& v, bool is_causal, double sc) {
  const int64_t B = q.size(0), Hq = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t G = Hq / k.size(1);
  Tensor p = attention_probs(q, k, std::nullopt, is_causal, sc, kFloat32);
  Tensor gf = reshape(cast(go, kFloat32), {B, k.size(1), G * Tq, D});
  Tensor dp = matmul(gf, cast(v, kFloat32).mT());
  Tensor ds = p * (dp - sum(dp * p, {-1}, true));
  Tensor dq = reshape(matmul(ds, cast(k, kFloat32)) * sc, {B, Hq, Tq, D});
  Tensor dk = matmul(ds.mT(), reshape(cast(q, kFloat32), {B, k.size(1), G * Tq, D})) * sc;
  Tensor dv = matmul(p.mT(), gf);
  return {cast(dq, q.dtype()), cast(dk, k.dtype()), cast(dv, v.dtype())};
}

// The kernels take the row max of raw scores, so they need sc > 0 (any other scale is rare).
bool flash_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                     const std::optional<Tensor>& attn_mask, double sc) {
  const DeviceType dev = q.device().type;
  // CUDA's kernels run 16-bit dtypes on tensor cores at the listed head dims; the CPU's run
  // float32 at any head dim.
  const bool dtype_ok = dev == DeviceType::CPU
                            ? q.dtype() == kFloat32
                            : is_16bit_float(q.dtype()) && flash_attention_head_dim(q.size(3));
  return !attn_mask && sc > 0 && dtype_ok && q.size(3) == v.size(3) && q.numel() > 0 &&
         k.numel() > 0 && has_kernel<flash_attention_kernel>(dev) &&
         has_kernel<flash_attention_backward_kernel>(dev);
}

// t as the flash kernels read it in place (nn_kernels.h): last dim contiguous, the other strides
// multiples of 8 elements, 16-byte aligned data; a size-1 dim's stride is never used.
bool flash_layout(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  for (int64_t d = 0; d < 4; ++d)
    if (t.size(d) != 1 && (d == 3 ? t.stride(d) != 1 : t.stride(d) % 8 != 0)) return false;
  return true;
}

// A detached t the kernels can read: t itself, or a fresh contiguous copy.
Tensor flash_operand(const Tensor& t) {
  Tensor x = t.detach();
  if (flash_layout(x)) return x;
  Tensor c = empty(x.sizes(), options_of(x));
  c.copy_(x);
  return c;
}

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                       double sc) {
  Tensor out = empty(q.sizes(), options_of(q));
  Tensor lse =
      empty({q.size(0), q.size(1), q.size(2)}, TensorOptions(kFloat32).with_device(q.device()));
  call_kernel<flash_attention_kernel>(q.device(), out, lse, flash_operand(q), flash_operand(k),
                                      flash_operand(v), sc, is_causal);
  if (needs_grad({q, k, v})) {
    record("FlashAttentionBackward", {q, k, v}, {out}, {q, k, v, out, lse},
           [=](BackwardContext& ctx, const TensorList& g) {
             Tensor q = ctx.saved(0), k = ctx.saved(1), v = ctx.saved(2);
             Tensor go = cast(g[0], q.dtype());
             if (autograd::GradMode::is_enabled())
               return composite_attention_backward(go, q, k, v, is_causal, sc);
             Tensor dq = empty(q.sizes(), options_of(q));
             Tensor dk = empty(k.sizes(), options_of(k));
             Tensor dv = empty(v.sizes(), options_of(v));
             call_kernel<flash_attention_backward_kernel>(
                 q.device(), dq, dk, dv, flash_operand(go), flash_operand(q), flash_operand(k),
                 flash_operand(v), ctx.saved(3), ctx.saved(4), sc, is_causal);
             return TensorList{dq, dk, dv};
           });
  }
  return out;
}

}  // namespace

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
  const int64_t Hkv = k.size(1), Tk = k.size(2);
  TESSERA_CHECK(
      k.size(0) == B && v.size(0) == B && v.size(1) == Hkv && v.size(2) == Tk && k.size(3) == D,
      ValueError, "[", kSdpa,
      "] expected k [B, Hkv, Tk, D] and v [B, Hkv, Tk, Dv] matching q [B, Hq, Tq, D], "
      "got shapes ",
      q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  TESSERA_CHECK(Hkv > 0 && Hq % Hkv == 0, ValueError, "[", kSdpa, "] expected the query heads (",
                Hq, ") to be a multiple of the key/value heads (", Hkv, ")");
  if (attn_mask) {
    const Shape scores_shape{B, Hq, Tq, Tk};
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
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  if (flash_supported(q, k, v, attn_mask, sc)) return flash_attention(q, k, v, is_causal, sc);
  return composite_attention(q, k, v, attn_mask, is_causal, sc);
}

TESSERA_REGISTER_OPS({kSdpa, "nn", kFloatingTypes, true, CastPolicy::kLowerPrecision});

}  // namespace tessera

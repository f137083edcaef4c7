// Matrix products. Everything reduces to one differentiable N-d matmul whose forward calls the
// backend GEMM on 3-d operands (batch folded or broadcast) and whose backward is two matmuls on
// transposed views.
#include "tessera/ops/linalg.h"

#include <tuple>
#include <utility>

#include "backend/common/linalg_kernels.h"
#include "backend/common/tensor_iterator.h"
#include "ops/op_utils.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

// out = a @ b for a [..., M, K], b [..., K, N] (both >= 2-d), without autograd.
Tensor matmul_raw(const Tensor& a, const Tensor& b) {
  autograd::NoGradGuard ng;
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape a_batch(a.sizes().begin(), a.sizes().end() - 2);
  Shape b_batch(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(a_batch, b_batch, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor a3, b3;
  int64_t B = shape_numel(batch);
  if (b.dim() == 2) {
    // Fold a's batch into its rows: one [B*M, K] @ [K, N] GEMM.
    a3 = reshape(a, {1, B * M, K});
    b3 = unsqueeze(b, 0);
    Tensor out = empty({1, B * M, N}, TensorOptions(a.dtype()).with_device(a.device()));
    call_kernel<gemm_kernel>(a.device(), out, a3, b3);
    return reshape(out, out_shape);
  }
  Shape a_full = batch, b_full = batch;
  a_full.insert(a_full.end(), {M, K});
  b_full.insert(b_full.end(), {K, N});
  a3 = reshape(expand(a, a_full), {B, M, K});
  b3 = shape_numel(b_batch) == 1 && a.dim() >= b.dim() ? reshape(b, {1, K, N})
                                                        : reshape(expand(b, b_full), {B, K, N});
  Tensor out = empty({B, M, N}, TensorOptions(a.dtype()).with_device(a.device()));
  call_kernel<gemm_kernel>(a.device(), out, a3, b3);
  return reshape(out, out_shape);
}

Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  TESSERA_CHECK(a.size(-1) == b.size(-2), ValueError, "[matmul] expected a's last dim (",
                a.size(-1), ") to equal b's second-to-last dim (", b.size(-2), "), got shapes ",
                a.sizes(), " and ", b.sizes());
  Tensor out = matmul_raw(a, b);
  if (needs_grad({a, b})) {
    record("MatmulBackward", {a, b}, {out}, {a, b},
           [sa = a.sizes(), sb = b.sizes()](BackwardContext& ctx, const TensorList& g) {
             Tensor x = ctx.saved(0), y = ctx.saved(1);
             TensorList r(2);
             if (ctx.needs_input_grad(0)) r[0] = sum_to(matmul(g[0], y.mT()), sa);
             if (ctx.needs_input_grad(1)) {
               r[1] = sb.size() == 2 ? matmul(flatten(x, 0, -2).mT(), flatten(g[0], 0, -2))
                                     : sum_to(matmul(x.mT(), g[0]), sb);
             }
             return r;
           });
  }
  return out;
}

// linear as one GEMM with the bias added in its epilogue, on backends that have one; the
// gradient is written with public ops, so it differentiates again.
bool fused_linear_supported(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType dt = x.dtype();
  return x.dim() >= 2 && (dt == kFloat32 || dt == kBFloat16 || dt == kFloat16) &&
         weight.dtype() == dt && bias.dtype() == dt &&
         has_kernel<gemm_bias_kernel>(x.device().type);
}

// A linear's weight and bias gradients, g2^T x2 and sum(g2, 0), as one GEMM whose epilogue sums
// the rows of g2^T, on backends with one. Not differentiable: outside create_graph only.
bool fused_weight_bias_grads_supported(const Tensor& g2) {
  return !autograd::GradMode::is_enabled() && has_kernel<gemm_row_sums_kernel>(g2.device().type);
}

std::pair<Tensor, Tensor> fused_weight_bias_grads(const Tensor& g2, const Tensor& x2) {
  const int64_t N = g2.size(1), K = x2.size(1);
  Tensor dw = empty({1, N, K}, options_of(g2)), db = empty({N}, options_of(g2));
  call_kernel<gemm_row_sums_kernel>(g2.device(), dw, unsqueeze(g2.mT(), 0), unsqueeze(x2, 0), db);
  return {reshape(dw, {N, K}), db};
}

// Records out = x @ weight^T + bias computed by one kernel.
void record_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  record("LinearBackward", {x, weight, bias}, {out}, {x, weight},
         [](BackwardContext& ctx, const TensorList& g) {
           const Tensor x = ctx.saved(0), w = ctx.saved(1);
           const Tensor g2 = flatten(g[0], 0, -2);
           TensorList r(3);
           if (ctx.needs_input_grad(0)) r[0] = matmul(g[0], w);
           if (ctx.needs_input_grad(1) && ctx.needs_input_grad(2) &&
               fused_weight_bias_grads_supported(g2)) {
             std::tie(r[1], r[2]) = fused_weight_bias_grads(g2, flatten(x, 0, -2));
             return r;
           }
           if (ctx.needs_input_grad(1)) r[1] = matmul(g2.mT(), flatten(x, 0, -2));
           if (ctx.needs_input_grad(2)) r[2] = sum(g2, {0});
           return r;
         });
}

// x [..., K] as the GEMM's [1, rows, K], the result's shape, and the weight as [1, K, N].
struct LinearShapes {
  Tensor x3, w3;
  Shape out_shape;
  Shape out3() const { return {1, x3.size(1), w3.size(2)}; }
};
LinearShapes linear_shapes(const Tensor& x, const Tensor& weight) {
  Shape out_shape = x.sizes();
  out_shape.back() = weight.size(0);
  return {reshape(x, {1, -1, x.size(-1)}), unsqueeze(weight.t(), 0), out_shape};
}

Tensor fused_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor out;
  {
    autograd::NoGradGuard ng;
    const LinearShapes s = linear_shapes(x, weight);
    out = empty(s.out3(), options_of(x));
    call_kernel<gemm_bias_kernel>(x.device(), out, s.x3, s.w3, contiguous(bias));
    out = reshape(out, s.out_shape);
  }
  if (needs_grad({x, weight, bias})) record_linear(x, weight, bias, out);
  return out;
}

// gelu(linear(x, weight, bias), "tanh") from one kernel call, which also returns the GELU's
// input when a gradient needs it; autograd records the two nodes the separate ops would.
Tensor fused_linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const bool grad = needs_grad({x, weight, bias});
  Tensor out, pre;
  {
    autograd::NoGradGuard ng;
    const LinearShapes s = linear_shapes(x, weight);
    out = empty(s.out3(), options_of(x));
    if (grad) pre = empty(s.out3(), options_of(x));
    call_kernel<gemm_bias_gelu_kernel>(x.device(), out, pre, s.x3, s.w3, contiguous(bias));
    out = reshape(out, s.out_shape);
    if (grad) pre = reshape(pre, s.out_shape);
  }
  if (grad) {
    record_linear(x, weight, bias, pre);
    record_gelu_tanh(pre, out);
  }
  return out;
}

// linear's argument checks (after autocast); marks a weight no gradient is taken for as frozen.
void check_linear_args(const char* op, const Tensor& x, const Tensor& weight,
                       const std::optional<Tensor>& bias) {
  TESSERA_CHECK(weight.dim() == 2, ValueError, "[", op, "] expected a 2-d weight [out, in], got ",
                weight.sizes());
  TESSERA_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), ValueError, "[", op,
                "] expected input features ", weight.size(1), ", got input shape ", x.sizes());
  TESSERA_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == weight.size(0)), ValueError, "[", op,
                "] expected a bias of shape [", weight.size(0), "], got ", bias->sizes());
  // A weight no gradient is taken for is read again unchanged: the backend may pack it once.
  if (!(autograd::GradMode::is_enabled() && weight.requires_grad()))
    weight.impl()->storage()->mark_frozen_weight();
}

}  // namespace

Tensor matmul(const Tensor& a_, const Tensor& b_) {
  TESSERA_OP_SCOPE("matmul", a_, b_);
  const Tensor& a = op_scope.arg(0);
  const Tensor& b = op_scope.arg(1);
  TESSERA_CHECK(a.dim() >= 1 && b.dim() >= 1, ValueError,
                "[matmul] expected tensors with at least 1 dim, got shapes ", a.sizes(), " and ",
                b.sizes());
  TESSERA_CHECK(a.dtype() == b.dtype(), TypeError,
                "[matmul] expected both operands to have the same dtype, got ", a.dtype(), " and ",
                b.dtype());
  TESSERA_CHECK(a.device() == b.device(), ValueError, "[matmul] expected both tensors on ",
                a.device().str(), ", got ", b.device().str());
  if (a.dim() == 1 && b.dim() == 1) {
    TESSERA_CHECK(a.size(0) == b.size(0), ValueError,
                  "[matmul] expected vectors of equal length, got ", a.sizes(), " and ", b.sizes());
    return reshape(matmul_nd(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  }
  if (a.dim() == 1) return squeeze(matmul_nd(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul_nd(a, unsqueeze(b, 1)), -1);
  return matmul_nd(a, b);
}

Tensor mm(const Tensor& a_, const Tensor& b_) {
  TESSERA_OP_SCOPE("mm", a_, b_);
  const Tensor& a = op_scope.arg(0);
  const Tensor& b = op_scope.arg(1);
  TESSERA_CHECK(a.dim() == 2 && b.dim() == 2, ValueError,
                "[mm] expected 2-d matrices, got shapes ", a.sizes(), " and ", b.sizes());
  return matmul(a, b);
}

Tensor bmm(const Tensor& a_, const Tensor& b_) {
  TESSERA_OP_SCOPE("bmm", a_, b_);
  const Tensor& a = op_scope.arg(0);
  const Tensor& b = op_scope.arg(1);
  TESSERA_CHECK(a.dim() == 3 && b.dim() == 3, ValueError,
                "[bmm] expected 3-d batches, got shapes ", a.sizes(), " and ", b.sizes());
  TESSERA_CHECK(a.size(0) == b.size(0), ValueError,
                "[bmm] expected equal batch sizes, got ", a.size(0), " and ", b.size(0));
  return matmul(a, b);
}

namespace {
Tensor scaled_sum(const Tensor& input, const Tensor& product, const Scalar& beta,
                  const Scalar& alpha) {
  Tensor p = alpha.to_double() == 1.0 ? product : product * alpha;
  if (beta.to_double() == 0.0) return p;  // input ignored (even nan), as in torch
  Tensor i = beta.to_double() == 1.0 ? input : input * beta;
  return i + p;
}
}  // namespace

Tensor addmm(const Tensor& input_, const Tensor& a_, const Tensor& b_, const Scalar& beta,
             const Scalar& alpha) {
  TESSERA_OP_SCOPE("addmm", input_, a_, b_);
  return scaled_sum(op_scope.arg(0), mm(op_scope.arg(1), op_scope.arg(2)), beta, alpha);
}

Tensor baddbmm(const Tensor& input_, const Tensor& b1_, const Tensor& b2_, const Scalar& beta,
               const Scalar& alpha) {
  TESSERA_OP_SCOPE("baddbmm", input_, b1_, b2_);
  return scaled_sum(op_scope.arg(0), bmm(op_scope.arg(1), op_scope.arg(2)), beta, alpha);
}

Tensor linear(const Tensor& x_, const Tensor& weight_, const std::optional<Tensor>& bias_) {
  TESSERA_OP_SCOPE("linear", x_, weight_, bias_);
  const Tensor& x = op_scope.arg(0);
  const Tensor& weight = op_scope.arg(1);
  const std::optional<Tensor> bias = op_scope.optional_arg(2);
  check_linear_args("linear", x, weight, bias);
  if (!bias) return matmul(x, weight.t());
  if (fused_linear_supported(x, weight, *bias)) return fused_linear(x, weight, *bias);
  return matmul(x, weight.t()) + *bias;
}

Tensor linear_gelu(const Tensor& x_, const Tensor& weight_, const std::optional<Tensor>& bias_,
                   std::string_view approximate) {
  TESSERA_OP_SCOPE("linear_gelu", x_, weight_, bias_);
  const Tensor& x = op_scope.arg(0);
  const Tensor& weight = op_scope.arg(1);
  const std::optional<Tensor> bias = op_scope.optional_arg(2);
  check_linear_args("linear_gelu", x, weight, bias);
  TESSERA_CHECK(approximate == "none" || approximate == "tanh", ValueError,
                "[linear_gelu] expected approximate 'none' or 'tanh', got '", approximate, "'");
  const DType dt = x.dtype();
  const bool fused = bias && approximate == "tanh" && x.dim() >= 2 && is_floating(dt) &&
                     weight.dtype() == dt && bias->dtype() == dt &&
                     has_kernel<gemm_bias_gelu_kernel>(x.device().type);
  if (fused) return fused_linear_gelu(x, weight, *bias);
  return gelu(linear(x, weight, bias), approximate);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("outer", a, b);
  TESSERA_CHECK(a.dim() == 1 && b.dim() == 1, ValueError,
                "[outer] expected 1-d vectors, got shapes ", a.sizes(), " and ", b.sizes());
  return unsqueeze(a, 1) * unsqueeze(b, 0);
}

Tensor Tensor::matmul(const Tensor& o) const { return tessera::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return tessera::mm(*this, o); }

// GEMMs run in autocast's lower precision (PyTorch's lower_precision_fp list).
TESSERA_REGISTER_OPS({"matmul", "linalg", kNumericTypes, true, CastPolicy::kLowerPrecision},
                     {"mm", "linalg", kNumericTypes, true, CastPolicy::kLowerPrecision},
                     {"bmm", "linalg", kNumericTypes, true, CastPolicy::kLowerPrecision},
                     {"addmm", "linalg", kNumericTypes, true, CastPolicy::kLowerPrecision},
                     {"baddbmm", "linalg", kNumericTypes, true, CastPolicy::kLowerPrecision},
                     {"linear", "linalg", kNumericTypes, true, CastPolicy::kLowerPrecision},
                     {"linear_gelu", "linalg", kFloatingTypes, true, CastPolicy::kLowerPrecision},
                     {"outer", "linalg", kAllTypes, true});

}  // namespace tessera

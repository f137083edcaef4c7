#pragma once
// Kernel keys for the nn family: softmax, normalisation, swiglu's backward and class losses.
// Every tensor a kernel receives is contiguous; "rows" are the leading dims flattened. Arithmetic
// is in opmath (float for 16-bit types), statistics saved for backward (mean, rstd, lse) are
// float (double for float64). Undefined tensor arguments mean "absent" (no weight) or "not
// needed" (a gradient).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/common/vec_math.h"
#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

enum class SoftmaxKind : uint8_t {
  Softmax,
  LogSoftmax,
  SafeSoftmax,  // softmax whose all -inf slices give 0 instead of nan (attention)
};

// out = softmax of in along the middle axis of [outer, n, inner].
TESSERA_DECLARE_KERNEL(softmax_kernel, void(const Tensor& out, const Tensor& in, int64_t outer,
                                            int64_t n, int64_t inner, SoftmaxKind kind));
// grad_in from grad_out and the forward output y: y (g - sum(g y)) for softmax,
// g - exp(y) sum(g) for log_softmax.
TESSERA_DECLARE_KERNEL(softmax_backward_kernel,
                       void(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out,
                            int64_t outer, int64_t n, int64_t inner, SoftmaxKind kind));

// x [rows, n]: y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps) (biased var);
// writes mean and rstd [rows]. weight, bias [n] may be undefined.
TESSERA_DECLARE_KERNEL(layer_norm_kernel,
                       void(const Tensor& y, const Tensor& mean, const Tensor& rstd,
                            const Tensor& x, const Tensor& weight, const Tensor& bias, double eps));
// With xhat = (x - mean) rstd and gw = dy * weight:
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), dweight = sum_rows dy xhat, dbias = sum_rows
//   dy.
// Any of dx, dweight, dbias may be undefined (not needed).
TESSERA_DECLARE_KERNEL(layer_norm_backward_kernel,
                       void(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                            const Tensor& dy, const Tensor& x, const Tensor& mean,
                            const Tensor& rstd, const Tensor& weight));

// h = x (+ residual, written to h_out when residual is defined); y = h * rstd * weight with
// rstd = 1 / sqrt(mean(h^2) + eps) written to rstd [rows]. weight [n] may be undefined.
TESSERA_DECLARE_KERNEL(rms_norm_kernel,
                       void(const Tensor& y, const Tensor& rstd, const Tensor& h_out,
                            const Tensor& x, const Tensor& residual, const Tensor& weight,
                            double eps));
// With xhat = h rstd and gw = dy * weight: dx = rstd (gw - xhat mean(gw xhat)) + dh (dh may be
// undefined), dweight = sum_rows dy xhat (may be undefined).
TESSERA_DECLARE_KERNEL(rms_norm_backward_kernel,
                       void(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                            const Tensor& dh, const Tensor& h, const Tensor& rstd,
                            const Tensor& weight));

// dgate = dout up silu'(gate), dup = dout silu(gate), all five of one shape and dtype
// (fn::swiglu_grads per element).
TESSERA_DECLARE_KERNEL(swiglu_backward_kernel,
                       void(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                            const Tensor& gate, const Tensor& up));

// Options of the class-index losses (cross_entropy, nll_loss).
struct ClassLossParams {
  int64_t ignore_index = std::numeric_limits<int64_t>::min();  // min() = nothing ignored
  double label_smoothing = 0.0;
  bool from_logits = true;  // false: input already holds log-probabilities (nll_loss)
};

// input [M, C], target [M] int64 (validated: in [0, C) or ignore_index), weight [C] or undefined.
// With lp = input - lse (lse = logsumexp of the row, or 0 for log-probabilities), eps the label
// smoothing and w the class weights (1 when undefined), row i with target t:
//   loss[i] = (1 - eps) w[t] (-lp[t]) + eps / C * sum_c w[c] (-lp[c]),  row_weight[i] = w[t]
// and both are 0 on ignored rows. loss, lse, row_weight [M] are float (double for float64).
TESSERA_DECLARE_KERNEL(class_loss_kernel,
                       void(const Tensor& loss, const Tensor& lse, const Tensor& row_weight,
                            const Tensor& input, const Tensor& target, const Tensor& weight,
                            const ClassLossParams& params));
// dinput [M, C] = grad_rows[i] * d loss[i] / d input[i, :]; with p = exp(lp) (0 for nll):
//   (1 - eps) w[t] (p - onehot(t)) + eps / C (sum(w) p - w); 0 on ignored rows.
TESSERA_DECLARE_KERNEL(class_loss_backward_kernel,
                       void(const Tensor& dinput, const Tensor& grad_rows, const Tensor& input,
                            const Tensor& lse, const Tensor& target, const Tensor& weight,
                            const ClassLossParams& params));

// Flash attention (fused, no [Tq, Tk] score matrix) on q [B, Hq, Tq, D] and k, v [B, Hkv, Tk, D]
// of one dtype (CUDA: bfloat16 or float16; CPU: float32), Hq % Hkv == 0: query head h reads KV head
// h / (Hq / Hkv). With s = scale q k^T (scale > 0), causal top-left aligned (query i sees keys
// j <= i):
//   out = softmax(s) v [B, Hq, Tq, D],  lse = logsumexp(s) float [B, Hq, Tq]
// (a row that sees no key gives out 0 and lse -inf). Layout contract, unlike the rest of this
// file: q, k, v and dout need only their last dim contiguous, their other strides multiples of 8
// elements and their data 16-byte aligned (a [B, T, H, D] tensor transposed to [B, H, T, D]
// qualifies); out, lse, dq, dk and dv are contiguous. head_dim must pass
// flash_attention_head_dim.
TESSERA_DECLARE_KERNEL(flash_attention_kernel,
                       void(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                            const Tensor& v, double scale, bool is_causal));
// The FlashAttention-2 backward from the forward's out and lse, with delta = rowsum(dout out):
//   p = exp(s - lse), dv = p^T dout, ds = p (dout v^T - delta), dq = scale ds k,
//   dk = scale ds^T q (summed over the Hq / Hkv query heads of a KV head).
TESSERA_DECLARE_KERNEL(flash_attention_backward_kernel,
                       void(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse, double scale, bool is_causal));
// Head dims the CUDA flash kernels are built for (the CPU's take any).
constexpr bool flash_attention_head_dim(int64_t d) {
  return d == 32 || d == 64 || d == 96 || d == 128;
}

namespace detail {


// max for reductions under `omp simd` (std::max's reference form keeps them scalar). A nan b is
// skipped; callers let nan reach the result through exp.
template <class A>
inline A vmax(A a, A b) {
  return b > a ? b : a;
}

// The max of n values x[i] (converted to A) under `omp simd`; -inf when there are none or all
// are -inf or nan. OpenMP starts a max reduction's private copies at the type's lowest value:
// -inf under GCC but the lowest finite value under clang, where a row of -inf came out as that
// (so a fully masked softmax row gave nan instead of zeros). That case is scanned again here.
template <class A, class T>
inline A simd_max(const T* x, int64_t n) {
  A m = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = vmax(m, static_cast<A>(x[i]));
  if (m == std::numeric_limits<A>::lowest()) {
    m = -std::numeric_limits<A>::infinity();
    for (int64_t i = 0; i < n; ++i) m = vmax(m, static_cast<A>(x[i]));
  }
  return m;
}

}  // namespace detail

}  // namespace tessera

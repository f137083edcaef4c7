#pragma once
// Neural-network functional ops (torch.nn.functional equivalents).
#include <optional>
#include <string_view>
#include <tuple>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/creation.h"

namespace tessera {

enum class Reduction { None, Mean, Sum };
// Parses "none" / "mean" / "sum"; throws ValueError naming op otherwise.
Reduction reduction_from_string(std::string_view s, std::string_view op);

// exp(x) / sum(exp(x)) along dim; a slice that is all -inf gives nan, as in torch.
Tensor softmax(const Tensor& x, int64_t dim);
// x - logsumexp(x) along dim.
Tensor log_softmax(const Tensor& x, int64_t dim);
// Normalises over the trailing normalized_shape dims; weight/bias of that shape are optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight = std::nullopt,
                  const std::optional<Tensor>& bias = std::nullopt, double eps = 1e-5);
// x / sqrt(mean(x^2, last dim) + eps) * weight.
Tensor rms_norm(const Tensor& x, const std::optional<Tensor>& weight = std::nullopt,
                double eps = 1e-6);
// (residual + x, rms_norm(residual + x)): the pre-norm transformer step, fused.
std::tuple<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual,
                                        const std::optional<Tensor>& weight = std::nullopt,
                                        double eps = 1e-6);
// Zeroes elements with probability p (scaling the rest by 1/(1-p)) when training; returns x
// itself when !training or p == 0, zeros when p == 1. The mask is drawn from gen (the default
// generator when null), one Philox block per element, so it is the same for any thread count.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
// logits [N, C] or [N, C, d1...] (or [C]); target int64 class indices of shape [N] or
// [N, d1...] (or []), each in [0, C) or equal to ignore_index (nullopt: none ignored). As torch:
// label smoothing mixes in eps/C of the uniform distribution; mean divides by the summed class
// weight of the non-ignored targets (nan when all are ignored). A floating target of the logits'
// shape is read as class probabilities (the mean then divides by the number of samples).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     std::optional<int64_t> ignore_index = -100, double label_smoothing = 0.0,
                     Reduction reduction = Reduction::Mean,
                     const std::optional<Tensor>& weight = std::nullopt);
// -weight[t] * log_probs[t] per sample; shapes, ignore_index and reductions as cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                std::optional<int64_t> ignore_index = -100, Reduction reduction = Reduction::Mean,
                const std::optional<Tensor>& weight = std::nullopt);
// (input - target)^2 (broadcast), reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// softmax(q k^T * scale + mask) v for q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv]
// with Hq % Hkv == 0 (GQA: query head h uses KV head h / (Hq / Hkv), without copying KV).
// attn_mask: bool (true = keep) or additive float, broadcastable to [B, Hq, Tq, Tk]; is_causal
// keeps keys j <= i (top-left aligned, as torch) and excludes attn_mask. scale defaults to
// 1/sqrt(D). A query that sees no key gets 0 (torch's safe softmax). 16-bit inputs compute in
// float32.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask = std::nullopt,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
// Rotary embedding. x is [..., T, D] with T the second-to-last dim (e.g. [B, H, T, D], the
// layout scaled_dot_product_attention takes); cos/sin are [T, D/2] tables (rope_tables), or any
// shape broadcastable to [..., T, D/2] (e.g. [B, 1, T, D/2] for per-sequence positions; for x in
// [B, T, H, D] pass cos.unsqueeze(1), i.e. [T, 1, D/2]). Each pair (a, b) becomes
// (a cos_i - b sin_i, b cos_i + a sin_i) with pairs (x[2i], x[2i+1]) when interleaved (Meta
// llama, llama2.c) else (x[i], x[i + D/2]) (Hugging Face rotate_half). Tables are cast to x's
// dtype. One fused kernel forward and backward (a composite when cos or sin require grad).
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved = false);
// Cos/sin tables [T, D/2] for positions t = 0..T-1 and base theta: angle[t, i] =
// t * theta^(-2i / D), computed in double and rounded to dtype.
std::tuple<Tensor, Tensor> rope_tables(int64_t seq_len, int64_t head_dim, double theta = 10000.0,
                                       TensorOptions options = {kFloat32});
// silu(gate) * up (broadcasting), one fused pass forward and backward.
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace tessera

#pragma once
// Neural-network functional ops (torch.nn.functional equivalents).
#include <optional>
#include <string_view>
#include <tuple>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"

namespace tessera {

enum class Reduction { None, Mean, Sum };
// Parses "none" / "mean" / "sum"; throws ValueError naming op otherwise.
Reduction reduction_from_string(std::string_view s, std::string_view op);

Tensor softmax(const Tensor& x, int64_t dim);
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
// Zeroes elements with probability p (scaling the rest by 1/(1-p)) when training.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
// logits [N, C] or [N, C, d1...] (or [C]); target int64 class indices.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     std::optional<int64_t> ignore_index = -100, double label_smoothing = 0.0,
                     Reduction reduction = Reduction::Mean,
                     const std::optional<Tensor>& weight = std::nullopt);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                std::optional<int64_t> ignore_index = -100, Reduction reduction = Reduction::Mean,
                const std::optional<Tensor>& weight = std::nullopt);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// q [B, Hq, Tq, D], k/v [B, Hkv, Tk, D] with Hq % Hkv == 0 (GQA repeats KV heads).
// attn_mask: bool (true = keep) or additive float, broadcastable to [B, Hq, Tq, Tk].
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask = std::nullopt,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
// Rotary embedding of x [B, T, H, D] (or [..., T, D] with head dims between) given cos/sin
// tables [T, D/2]; rotates pairs (x[2i], x[2i+1]) when interleaved, else (x[i], x[i+D/2]).
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved = false);
// Cos/sin tables [T, D/2] for positions 0..T-1 and base theta.
std::tuple<Tensor, Tensor> rope_tables(int64_t seq_len, int64_t head_dim, double theta = 10000.0,
                                       DType dtype = kFloat32);
// silu(gate) * up.
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace tessera

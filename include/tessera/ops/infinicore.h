#pragma once
// The ops of InfiniCore's functional set that the rest of Tessera did not have: the causal
// softmax of a decode/prefill step, top-k/top-p/temperature sampling and einops-style
// rearrange. (linear, rms_norm, silu, swiglu, rope, embedding, add_rms_norm, narrow, squeeze and
// unsqueeze live with their op families.)
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"

namespace tessera {

// softmax over the last dim of scores x [..., T, S] (S >= T) where query i sees keys
// j <= i + S - T: the causal mask aligned bottom-right, as when the T new tokens follow S - T
// cached ones (InfiniCore's causal_softmax). Differentiable.
Tensor causal_softmax(const Tensor& x);

// Draws one token index per row of logits [V] or [B, V] (int64 result of shape [] or [B]):
// p = softmax(logits / temperature) sorted descending with cumulative sums c, then the first
// sorted index i with c[i] >= u * min(c[k-1], topp * c[V-1]) where k = topk (0 means V). Greedy
// argmax when temperature == 0, topk == 1 or topp <= 0. u is random_val when given (every row),
// else one uniform draw per row from gen (the default generator when null). Not differentiable.
Tensor random_sample(const Tensor& logits, std::optional<double> random_val = std::nullopt,
                     double topp = 1.0, int64_t topk = 0, double temperature = 1.0,
                     Generator* gen = nullptr);

// einops-style axis rearrangement, e.g. rearrange(x, "b t (h d) -> b h t d", {{"h", 4}}):
// each side lists axis names, parenthesised groups that merge/split dims, "..." for the
// remaining dims and "1" or "()" for unit dims; both sides must name the same axes. Group sizes
// the shape leaves open come from `sizes`. A view when strides allow, else a copy;
// differentiable.
Tensor rearrange(const Tensor& x, std::string_view pattern,
                 const std::vector<std::pair<std::string, int64_t>>& sizes = {});

}  // namespace tessera

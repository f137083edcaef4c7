#pragma once
// RoPE's inverse frequencies and the factor its cos/sin tables are multiplied by, with the
// scaling rules of RopeScaling (Hugging Face's rope_type llama3, linear and yarn), in double.
#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/models/config.h"

namespace tessera::models {

// theta^(-2i / head_dim) for i < head_dim / 2, rescaled by scaling's rule when given.
// ValueError unless head_dim is even and positive.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta,
                                  const std::optional<RopeScaling>& scaling = std::nullopt);

// What cos and sin are multiplied by (so attention logits by its square): YaRN's attention
// factor, 1 for the other rules and without scaling.
double rope_attention_factor(const std::optional<RopeScaling>& scaling);

}  // namespace tessera::models

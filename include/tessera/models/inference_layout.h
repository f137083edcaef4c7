#pragma once
// What an inference runner needs of a decoder-only model, without knowing its class: the block
// structure and every layer's weights (Linear weights [out, in], as the modules hold them). A
// model family describes itself once here (CausalLM::inference_layout); the engine's runners
// read only this, so a new family or a new device's runner needs no switch on model types.
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::models {

struct InferenceLayout {
  enum class Norm { kLayerNorm, kRMSNorm };
  // kGeluTanh: fc2(gelu_tanh(fc1 x)); kSwiGLU: fc2(silu(gate x) * (up x)) with fc1 = {gate, up}.
  enum class Mlp { kGeluTanh, kSwiGLU };

  // A linear layer as one or more weights stacked along their outputs (q, k and v into one
  // projection; gate and up), each with its bias (undefined: none).
  struct Linear {
    TensorList weights, biases;
    std::vector<std::string> names;  // each weight's module path (what LoRA adapters name)
  };
  struct NormWeights {
    Tensor weight, bias;  // bias undefined for RMSNorm and bias-free LayerNorm
  };
  // One expert of a mixture-of-experts MLP: fc1 = {gate, up}, fc2 = down (SwiGLU).
  struct Expert {
    Linear fc1, fc2;
  };
  struct Layer {
    NormWeights norm1, norm2;  // before attention, before the MLP
    Linear qkv, o, fc1, fc2;   // fc1 and fc2 empty in a mixture of experts
    // A mixture of experts (Mixtral): the router [n_experts, dim] and the experts; the MLP is
    // the sum of the experts_per_token best-scored experts' outputs, weighted by their softmax
    // probabilities renormalised over those. Empty in a dense model.
    Linear router;
    std::vector<Expert> experts;
    // RMSNorm weights [head_dim] of each query and key head before the rotation (Qwen3's);
    // undefined: none.
    NormWeights q_norm, k_norm;
  };

  Norm norm = Norm::kLayerNorm;
  Mlp mlp = Mlp::kGeluTanh;
  int64_t dim = 0, n_heads = 0, n_kv_heads = 0, hidden = 0, max_seq_len = 0;
  int64_t head_dim = 0;           // 0: dim / n_heads
  int64_t experts_per_token = 0;  // of a mixture of experts
  bool renormalize_experts = true;  // the chosen experts' probabilities rescaled to sum 1
  double eps = 1e-5;
  Tensor token_embedding;     // [vocab, dim]
  Tensor position_embedding;  // learned [max_seq_len, dim], or undefined
  Tensor rope_cos, rope_sin;  // [max_seq_len, head_dim / 2] rotary tables, or undefined
  std::vector<Layer> layers;
  NormWeights final_norm;
  Tensor lm_head;  // [vocab, dim]

  // The sizes and kinds a runner steps by, read once from the fields above.
  struct Dims {
    bool rms_norm = false, swiglu = false;
    double eps = 1e-5;
    int64_t dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden = 0;
    int64_t experts_per_token = 0;
    bool renormalize_experts = true;
  };
  Dims dims() const {
    return {.rms_norm = norm == Norm::kRMSNorm,
            .swiglu = mlp == Mlp::kSwiGLU,
            .eps = eps,
            .dim = dim,
            .n_heads = n_heads,
            .n_kv_heads = n_kv_heads,
            .head_dim = head_dim > 0 ? head_dim : dim / n_heads,
            .hidden = hidden,
            .experts_per_token = experts_per_token,
            .renormalize_experts = renormalize_experts};
  }
};

}  // namespace tessera::models

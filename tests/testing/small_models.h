#pragma once
// Small randomly initialised models for tests of the inference runner (CPU and CUDA): a GQA
// LLaMA with RoPE scaling, a GPT-2, a Mixtral (the LLaMA with a mixture of experts) and a Qwen3
// (decoupled head size, query/key norms), each from a fixed seed, so two calls build equal
// weights.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tessera/autograd/grad_mode.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"

namespace tessera::testing {

// YaRN rope scaling by factor over an original context (its other fields Hugging Face's
// defaults).
inline models::RopeScaling yarn_scaling(double factor, int64_t original_context) {
  models::RopeScaling yarn;
  yarn.rope_type = "yarn";
  yarn.factor = factor;
  yarn.original_max_position_embeddings = original_context;
  return yarn;
}

inline models::LlamaConfig small_llama_config(int64_t max_seq_len) {
  models::LlamaConfig c;
  c.vocab_size = 61;
  c.dim = 48;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.hidden_dim = 72;
  c.max_seq_len = max_seq_len;
  c.rope_scaling = models::RopeScaling{8.0, 1.0, 4.0, 32};
  return c;
}

inline std::shared_ptr<models::CausalLM> small_llama(int64_t max_seq_len = 80) {
  manual_seed(11);
  return std::make_shared<models::Llama>(small_llama_config(max_seq_len));
}

// small_llama with 4 experts of 40 units, 2 per token. The router's weights are drawn 20x wider
// than the init's, so tokens prefer experts clearly (no near-ties for rounding to flip).
inline std::shared_ptr<models::CausalLM> small_mixtral(int64_t max_seq_len = 80) {
  models::LlamaConfig c = small_llama_config(max_seq_len);
  c.hidden_dim = 40;
  c.n_experts = 4;
  c.n_experts_per_token = 2;
  manual_seed(13);
  auto model = std::make_shared<models::Llama>(c);
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters())
    if (name.ends_with("block_sparse_moe.gate.weight")) p.mul_(20.0);
  return model;
}

// small_llama shaped as Qwen3: heads of 12 over the width of 48 (6 x 12 = 72 wide q), each query
// and key head RMS-normed before the rotation, with norm weights drawn away from 1.
inline std::shared_ptr<models::CausalLM> small_qwen3(int64_t max_seq_len = 80) {
  models::LlamaConfig c = small_llama_config(max_seq_len);
  c.explicit_head_dim = 12;
  c.qk_norm = true;
  manual_seed(15);
  auto model = std::make_shared<models::Llama>(c);
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters())
    if (name.ends_with("q_norm.weight") || name.ends_with("k_norm.weight"))
      p.copy_(1.0 + randn(p.sizes()) * 0.3);
  return model;
}

// small_qwen3 whose MLPs are Qwen3-MoE's: 4 experts of 40 units under Hugging Face's names, 2
// per token, weighted by their probabilities as they are (norm_topk_prob false). The router is
// drawn 20x wider, as small_mixtral's.
// c shaped as Qwen3-MoE: heads of head_dim with query/key norms, 4 experts of `hidden` units of
// which 2 per token, under Qwen3-MoE's names.
inline models::LlamaConfig qwen3_moe_config(models::LlamaConfig c, int64_t head_dim,
                                            int64_t hidden) {
  c.explicit_head_dim = head_dim;
  c.qk_norm = true;
  c.hidden_dim = hidden;
  c.n_experts = 4;
  c.n_experts_per_token = 2;
  c.qwen_moe = true;
  return c;
}

inline std::shared_ptr<models::CausalLM> small_qwen3_moe(int64_t max_seq_len = 80) {
  models::LlamaConfig c = qwen3_moe_config(small_llama_config(max_seq_len), 12, 40);
  c.norm_topk_prob = false;
  manual_seed(16);
  auto model = std::make_shared<models::Llama>(c);
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters())
    if (name.ends_with("mlp.gate.weight")) p.mul_(20.0);
  return model;
}

// Draws every bias of model from N(0, scale^2) (models initialise them to zero, where a bias
// left out of a computation would go unnoticed).
inline void draw_biases(nn::Module& model, double scale) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters())
    if (name.ends_with(".bias")) p.copy_(randn(p.sizes()) * scale);
}

// A Hugging Face Llama folder in dir: model.safetensors (a random 1-layer model of width 16) and
// its config.json; returns the weights' path.
inline std::string save_hf_llama(const std::filesystem::path& dir, int64_t vocab_size,
                                 int64_t max_seq_len = 32) {
  models::LlamaConfig c;
  c.vocab_size = vocab_size;
  c.dim = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.hidden_dim = 32;
  c.max_seq_len = max_seq_len;
  const std::string weights = (dir / "model.safetensors").string();
  io::save_safetensors(weights, models::Llama(c).state_dict());
  std::ofstream((dir / "config.json").string())
      << R"({"model_type": "llama", "vocab_size": )" << vocab_size
      << R"(, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 32, "max_position_embeddings": )"
      << max_seq_len << "}";
  return weights;
}

inline std::shared_ptr<models::CausalLM> small_gpt2(int64_t block_size = 80, int64_t n_embd = 40) {
  models::GPT2Config c;
  c.vocab_size = 70;
  c.block_size = block_size;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = n_embd;
  manual_seed(12);
  return std::make_shared<models::GPT2>(c);
}

}  // namespace tessera::testing

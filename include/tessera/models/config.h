#pragma once
// Model configurations: GPT-2 (nanoGPT's GPTConfig) and LLaMA (Meta's ModelArgs, with
// Llama-3 RoPE scaling). Each comes from a preset name or explicit fields, validates itself and
// converts to and from JSON (for checkpoints and the CLI).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::models {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the longest sequence (rows of the learned position table)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;  // after embeddings, attention probabilities, residual branches
  bool bias = true;      // biases in the Linear and LayerNorm layers (GPT-2 has them)
  double layer_norm_eps = 1e-5;

  // Presets: "gpt2" (124M), "gpt2-medium" (350M), "gpt2-large" (774M), "gpt2-xl" (1558M), and
  // llm.c's depth names "d6", "d12", "d24", "d36", "d48" (the same shapes, d6 = 384 channels
  // and 6 heads). All use vocab 50257 and block 1024. ValueError listing the names otherwise.
  static GPT2Config from_name(std::string_view name);
  static std::vector<std::string> names();
  // ValueError unless every size is positive, n_embd % n_head == 0 and dropout in [0, 1).
  void validate() const;
  int64_t head_dim() const { return n_embd / n_head; }
  // {"vocab_size": ..., ...}; from_json fills fields present in the object (others keep their
  // defaults) and validates. ValueError on malformed JSON or unknown keys.
  std::string to_json() const;
  static GPT2Config from_json(std::string_view json);
};

// RoPE frequency scaling for contexts beyond the pretrained one (Hugging Face's rope_scaling; its
// rope_type names the rule; models/rope_frequencies.h computes it):
//  - "llama3" (Llama 3.1): wavelengths longer than original_max_position_embeddings /
//    low_freq_factor are divided by factor, those shorter than original / high_freq_factor kept,
//    those between interpolated smoothly.
//  - "linear" (position interpolation): every frequency divided by factor.
//  - "yarn" (YaRN, Peng et al. 2023; Qwen2.5/Qwen3's long context, DeepSeek's): dimensions
//    turning more than beta_fast times over the original context are kept, those turning fewer
//    than beta_slow times divided by factor, a linear ramp between (its ends rounded outwards
//    when truncate); cos and sin are multiplied by attention_factor, which when 0 is derived:
//    0.1 ln(factor) + 1, or with DeepSeek's mscale and mscale_all_dim both set the ratio of that
//    formula scaled by each.
// Fields a rule does not use are ignored.
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  std::string rope_type = "llama3";
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
};

// RoPE uses the Hugging Face half-split convention (pairs x[i], x[i + D/2]); importers of
// interleaved checkpoints (Meta, llama2.c) permute the rows of wq/wk to it.
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t dim = 4096;  // hidden size
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 32;     // < n_heads: grouped-query attention
  int64_t hidden_dim = 11008;  // SwiGLU inner size
  int64_t max_seq_len = 4096;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  bool tie_embeddings = false;  // lm_head.weight is model.embed_tokens.weight
  // Biases on the q, k and v projections (Qwen2's); attention_bias puts them on o too (Hugging
  // Face LlamaConfig's attention_bias).
  bool qkv_bias = false;
  bool attention_bias = false;
  // Each attention head's size when it is not dim / n_heads (0: it is). Qwen3 and Mistral NeMo
  // decouple it: NeMo has 32 heads of 128 over a width of 5120.
  int64_t explicit_head_dim = 0;
  // Qwen3's RMSNorm of each query and key head (over head_dim, one weight shared by the heads)
  // before the rotary embedding.
  bool qk_norm = false;
  // Mixtral's sparse mixture of experts: with n_experts > 0 each layer's MLP is n_experts SwiGLU
  // experts of hidden_dim units, of which a router picks n_experts_per_token per token. Training
  // adds router_aux_loss_coef times the load-balancing loss (Hugging Face's
  // router_aux_loss_coef, default 0.001; 0 turns it off).
  int64_t n_experts = 0;
  int64_t n_experts_per_token = 2;
  double router_aux_loss_coef = 0.001;
  // Whether the chosen experts' probabilities are renormalised to sum 1 (Mixtral's, and
  // Hugging Face's norm_topk_prob) or weight the experts as they are.
  bool norm_topk_prob = true;
  // Qwen3-MoE's names: the mixture is the layer's "mlp" ({gate, experts.<j>.{gate,up,down}_proj})
  // instead of Mixtral's "block_sparse_moe" ({gate, experts.<j>.{w1,w3,w2}}).
  bool qwen_moe = false;

  // Presets: "llama2-7b", "llama2-13b", "llama3-8b", "llama3.1-8b", "llama3.2-1b",
  // "tinyllama-1.1b", llama2.c's "stories260K", "stories15M", "stories42M", "stories110M", and
  // "llama-test" (2 layers, dim 64, 4 heads / 2 KV heads, Llama-3 scaling; for tests), and the
  // mixtures of experts "mixtral-8x7b" and "mixtral-test" (llama-test's shape, 4 experts, top 2),
  // and Qwen3's "qwen3-0.6b", "qwen3-8b" and "qwen3-test" (llama-test's shape, heads of 24).
  static LlamaConfig from_name(std::string_view name);
  static std::vector<std::string> names();
  // ValueError unless sizes are positive, dim % n_heads == 0 (or an explicit head dim), the
  // head dim is even and n_heads % n_kv_heads == 0; with experts, 1 <= n_experts_per_token <=
  // n_experts and router_aux_loss_coef >= 0.
  void validate() const;
  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : dim / n_heads; }
  bool mixture_of_experts() const { return n_experts > 0; }
  // As GPT2Config; rope_scaling is null or an object with the RopeScaling fields.
  std::string to_json() const;
  static LlamaConfig from_json(std::string_view json);
};

}  // namespace tessera::models

#pragma once
// LLaMA (1/2/3, TinyLlama, llama2.c's stories models; Qwen2 with its q/k/v biases): RMSNorm
// pre-norm blocks, rotary position embeddings (theta, optional Llama-3 scaling; Hugging Face
// half-split pairs), grouped-query attention and a SwiGLU MLP, biases only as the config asks,
// optionally tied embeddings. Parameter names match
// Hugging Face transformers: model.embed_tokens.weight,
// model.layers.<i>.self_attn.{q,k,v,o}_proj.weight,
// model.layers.<i>.mlp.{gate,up,down}_proj.weight, model.layers.<i>.{input_layernorm,
// post_attention_layernorm}.weight, model.norm.weight, lm_head.weight. With
// LlamaConfig::n_experts > 0 the model is Mixtral: each layer's MLP is a sparse mixture of
// experts, model.layers.<i>.block_sparse_moe.{gate, experts.<j>.{w1, w2, w3}}.weight.
//
//   auto model = std::make_shared<models::Llama>(models::LlamaConfig::from_name("stories15M"));
//   Tensor logits = (*model)(idx);  // [B, T, V]
#include <memory>

#include "tessera/core/generator.h"
#include "tessera/models/config.h"
#include "tessera/models/transformer.h"
#include "tessera/nn/layers.h"

namespace tessera::models {

class LlamaAttention : public nn::Module {
 public:
  explicit LlamaAttention(const LlamaConfig& config);
  // x [B, T, dim]; cos/sin [T, head_dim / 2] for the positions of x.
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin);
  std::string type_name() const override { return "LlamaAttention"; }

  int64_t n_heads, n_kv_heads, head_dim;  // this rank's heads under tensor parallelism
  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<nn::RMSNorm> q_norm, k_norm;  // config.qk_norm (Qwen3's); null otherwise
  // Tensor parallelism: x enters the q, k, v region once (see Llama::shard_tensor_parallel).
  std::shared_ptr<dist::ProcessGroup> tp;
  bool sequence_parallel = false;
};

class LlamaMLP : public nn::UnaryModule {
 public:
  explicit LlamaMLP(const LlamaConfig& config);  // config.hidden_dim units
  Tensor forward(const Tensor& x) override;  // down(silu(gate(x)) * up(x))
  std::string type_name() const override { return "LlamaMLP"; }

  std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
  // Tensor parallelism: x enters the gate and up region once.
  std::shared_ptr<dist::ProcessGroup> tp;
  bool sequence_parallel = false;
};

// One expert of a mixture: w2(silu(w1 x) * (w3 x)), Mixtral's names for gate, down and up.
class MixtralExpert : public nn::UnaryModule {
 public:
  explicit MixtralExpert(const LlamaConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MixtralExpert"; }

  std::shared_ptr<nn::Linear> w1, w2, w3;
};

// Mixtral's sparse MLP: the router (gate) scores the experts of each token, the softmax (in at
// least float32) of the scores is cut to its top n_experts_per_token, renormalised to sum 1
// (unless config.norm_topk_prob is false), and the token's output is the sum of those experts'
// outputs weighted so. Only the chosen experts run, each once over all the rows that chose it.
// The experts are MixtralExperts, or LlamaMLPs under Qwen3-MoE's names (config.qwen_moe).
class MixtralSparseMoe : public nn::UnaryModule {
 public:
  explicit MixtralSparseMoe(const LlamaConfig& config);
  Tensor forward(const Tensor& x) override;  // [..., dim] -> [..., dim]
  std::string type_name() const override { return "MixtralSparseMoe"; }

  int64_t n_experts, top_k;
  bool norm_topk_prob;
  std::shared_ptr<nn::Linear> gate;         // the router, [n_experts, dim]
  std::shared_ptr<nn::ModuleList> experts;  // of MixtralExpert or LlamaMLP

  // What the load-balancing loss needs of the last forward: the sum over its tokens of the
  // router probabilities [n_experts] (differentiable), how many top-k picks each expert got,
  // and the token count.
  struct RouterStats {
    Tensor prob_sum;
    std::vector<int64_t> picks;
    int64_t tokens = 0;
  };
  RouterStats last_stats;
};

class LlamaDecoderLayer : public nn::Module {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& config);
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin);
  std::string type_name() const override { return "LlamaDecoderLayer"; }

  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;                       // null in a mixture of experts
  std::shared_ptr<MixtralSparseMoe> block_sparse_moe;  // null in a dense model
  std::shared_ptr<nn::RMSNorm> input_layernorm, post_attention_layernorm;
};

// The "model" submodule: embeddings, layers, final norm and the rotary tables.
class LlamaModel : public nn::Module {
 public:
  explicit LlamaModel(const LlamaConfig& config);
  std::string type_name() const override { return "LlamaModel"; }

  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList> layers;  // of LlamaDecoderLayer
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<RotaryEmbedding> rotary_emb;  // buffers only (non-persistent)
};

class Llama : public CausalLM {
 public:
  // Builds the model with Hugging Face's init: Linear and Embedding weights ~ N(0, 0.02), norms
  // 1. Draws from gen (the default generator when null).
  explicit Llama(LlamaConfig config, Generator* gen = nullptr);
  Tensor embed(const Tensor& idx) override;
  Tensor layers(const Tensor& x, int64_t begin, int64_t end) override;
  Tensor head(const Tensor& x) override;
  std::vector<std::string> stage_module_paths(int64_t begin, int64_t end) const override;
  int64_t n_layers() const override { return config.n_layers; }
  int64_t vocab_size() const override { return config.vocab_size; }
  InferenceLayout inference_layout() const override;
  int64_t max_seq_len() const override { return config.max_seq_len; }
  // Mixtral's load-balancing loss (Switch Transformer's, as Hugging Face's
  // load_balancing_loss_func): n_experts * sum_e f_e * P_e over the tokens of every layer in the
  // last forward, f_e the share of top-k picks that went to expert e and P_e its mean router
  // probability, times router_aux_loss_coef. Only while training, with experts and a coefficient.
  Tensor auxiliary_loss() const override;
  bool has_auxiliary_loss() const override {
    return config.mixture_of_experts() && config.router_aux_loss_coef > 0.0;
  }
  void reset_parameters(Generator* gen = nullptr);

  LlamaConfig config;
  std::shared_ptr<LlamaModel> model;
  std::shared_ptr<nn::Linear> lm_head;  // weight is model->embed_tokens->weight when tied

 protected:
  void shard_layers(const std::shared_ptr<dist::ProcessGroup>& group,
                    bool sequence_parallel) override;
};

}  // namespace tessera::models

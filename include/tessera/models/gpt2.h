#pragma once
// GPT-2 as nanoGPT writes it: learned token and position embeddings, pre-LayerNorm blocks
// (x + attn(ln_1(x)), x + mlp(ln_2(x))), a GELU-tanh MLP of width 4C, a final LayerNorm and an
// lm_head tied to the token embedding. Parameter names match nanoGPT and llm.c's PyTorch
// reference: transformer.wte.weight, transformer.wpe.weight,
// transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias},
// transformer.ln_f.{weight, bias}, lm_head.weight (Linear weights are [out, in]).
//
//   auto model = std::make_shared<models::GPT2>(models::GPT2Config::from_name("d12"));
//   Tensor loss = model->loss(x, y);      // x, y: [B, T] int64
//   Tensor next = (*model)(x, /*last_only=*/true);  // [B, 1, V]
#include <memory>

#include "tessera/core/generator.h"
#include "tessera/models/config.h"
#include "tessera/models/transformer.h"
#include "tessera/nn/layers.h"

namespace tessera::models {

// Multi-head causal self-attention: c_attn projects to q, k, v at once ([3C, C]), c_proj back.
// Under tensor parallelism n_head counts this rank's heads.
class GPT2Attention : public nn::Module {
 public:
  explicit GPT2Attention(const GPT2Config& config);
  Tensor forward(const Tensor& x);  // [B, T, C] -> [B, T, C]
  std::string type_name() const override { return "CausalSelfAttention"; }

  int64_t n_head;
  double dropout;
  std::shared_ptr<nn::Linear> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;
};

class GPT2MLP : public nn::UnaryModule {
 public:
  explicit GPT2MLP(const GPT2Config& config);
  Tensor forward(const Tensor& x) override;  // c_proj(gelu_tanh(c_fc(x)))
  std::string type_name() const override { return "MLP"; }

  std::shared_ptr<nn::Linear> c_fc, c_proj;
  std::shared_ptr<nn::Dropout> dropout;
};

class GPT2Block : public nn::UnaryModule {
 public:
  explicit GPT2Block(const GPT2Config& config);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Block"; }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<GPT2MLP> mlp;
};

// The "transformer" submodule: embeddings, blocks and the final norm.
class GPT2Transformer : public nn::Module {
 public:
  explicit GPT2Transformer(const GPT2Config& config);
  std::string type_name() const override { return "Transformer"; }

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;  // of GPT2Block
  std::shared_ptr<nn::LayerNorm> ln_f;
};

class GPT2 : public CausalLM {
 public:
  // Builds the model and initialises it as nanoGPT: Linear and Embedding weights ~ N(0, 0.02),
  // biases 0, the residual projections (attn.c_proj, mlp.c_proj) ~ N(0, 0.02 / sqrt(2 n_layer)),
  // LayerNorms 1 and 0. Draws from gen (the default generator when null).
  explicit GPT2(GPT2Config config, Generator* gen = nullptr);
  Tensor embed(const Tensor& idx) override;
  Tensor layers(const Tensor& x, int64_t begin, int64_t end) override;
  Tensor head(const Tensor& x) override;
  std::vector<std::string> stage_module_paths(int64_t begin, int64_t end) const override;
  int64_t n_layers() const override { return config.n_layer; }
  int64_t vocab_size() const override { return config.vocab_size; }
  InferenceLayout inference_layout() const override;
  int64_t max_seq_len() const override { return config.block_size; }
  // Re-draws every parameter as at construction.
  void reset_parameters(Generator* gen = nullptr);

  GPT2Config config;
  std::shared_ptr<GPT2Transformer> transformer;
  std::shared_ptr<nn::Linear> lm_head;  // weight is transformer->wte->weight

 protected:
  void shard_layers(const std::shared_ptr<dist::ProcessGroup>& group,
                    bool sequence_parallel) override;
};

}  // namespace tessera::models

#include "tessera/models/gpt2.h"

#include <cmath>
#include <utility>

#include "tessera/nn/init.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/shape.h"

namespace tessera::models {

GPT2Attention::GPT2Attention(const GPT2Config& config)
    : n_head(config.n_head), dropout(config.dropout) {
  c_attn = register_module(
      "c_attn", std::make_shared<nn::Linear>(config.n_embd, 3 * config.n_embd, config.bias));
  c_proj = register_module("c_proj",
                           std::make_shared<nn::Linear>(config.n_embd, config.n_embd, config.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(config.dropout));
}

Tensor GPT2Attention::forward(const Tensor& x) {
  const int64_t C = x.size(-1);
  TensorList qkv = split((*c_attn)(x), C, /*dim=*/-1);  // [B, T, C] each
  Tensor y = causal_attention(split_heads(qkv[0], n_head), split_heads(qkv[1], n_head),
                              split_heads(qkv[2], n_head), dropout, is_training());
  return (*resid_dropout)((*c_proj)(merge_heads(y)));
}

GPT2MLP::GPT2MLP(const GPT2Config& config) {
  c_fc = register_module(
      "c_fc", std::make_shared<nn::Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  c_proj = register_module(
      "c_proj", std::make_shared<nn::Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout));
}

Tensor GPT2MLP::forward(const Tensor& x) { return (*dropout)((*c_proj)(gelu((*c_fc)(x), "tanh"))); }

GPT2Block::GPT2Block(const GPT2Config& config) {
  const double eps = config.layer_norm_eps;
  ln_1 = register_module("ln_1",
                         std::make_shared<nn::LayerNorm>(config.n_embd, eps, true, config.bias));
  attn = register_module("attn", std::make_shared<GPT2Attention>(config));
  ln_2 = register_module("ln_2",
                         std::make_shared<nn::LayerNorm>(config.n_embd, eps, true, config.bias));
  mlp = register_module("mlp", std::make_shared<GPT2MLP>(config));
}

Tensor GPT2Block::forward(const Tensor& x) {
  Tensor h = x + attn->forward((*ln_1)(x));
  return h + (*mlp)((*ln_2)(h));
}

GPT2Transformer::GPT2Transformer(const GPT2Config& config) {
  wte = register_module("wte", std::make_shared<nn::Embedding>(config.vocab_size, config.n_embd));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(config.block_size, config.n_embd));
  drop = register_module("drop", std::make_shared<nn::Dropout>(config.dropout));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config.n_layer; ++i) h->push_back(std::make_shared<GPT2Block>(config));
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(
                                     config.n_embd, config.layer_norm_eps, true, config.bias));
}

GPT2::GPT2(GPT2Config cfg, Generator* gen) : config(std::move(cfg)) {
  config.validate();
  transformer = register_module("transformer", std::make_shared<GPT2Transformer>(config));
  lm_head = register_module(
      "lm_head", std::make_shared<nn::Linear>(config.n_embd, config.vocab_size, /*bias=*/false));
  lm_head->weight = lm_head->replace_parameter("weight", transformer->wte->weight);
  reset_parameters(gen);
}

void GPT2::reset_parameters(Generator* gen) {
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  // apply() visits children before parents, so the blocks' residual projections are re-drawn
  // after their Linear defaults.
  apply([&](nn::Module& m) {
    // lm_head's weight is wte's: drawn once, through the embedding.
    if (&m == lm_head.get()) return;
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::normal_(linear->weight, 0.0, 0.02, gen);
      if (linear->bias.defined()) nn::init::zeros_(linear->bias);
    } else if (auto* embedding = dynamic_cast<nn::Embedding*>(&m)) {
      nn::init::normal_(embedding->weight, 0.0, 0.02, gen);
    } else if (auto* norm = dynamic_cast<nn::LayerNorm*>(&m)) {
      if (norm->weight.defined()) nn::init::ones_(norm->weight);
      if (norm->bias.defined()) nn::init::zeros_(norm->bias);
    } else if (auto* block = dynamic_cast<GPT2Block*>(&m)) {
      // GPT-2 paper: projections into the residual stream scaled by 1/sqrt(2 n_layer).
      nn::init::normal_(block->attn->c_proj->weight, 0.0, residual_std, gen);
      nn::init::normal_(block->mlp->c_proj->weight, 0.0, residual_std, gen);
    }
  });
}

Tensor GPT2::forward(const Tensor& idx, bool last_only) {
  check_input(idx, "GPT2");
  const int64_t T = idx.size(1);
  Tensor pos = arange(T);
  if (idx.device() != pos.device()) pos = pos.to(idx.device());
  Tensor x = (*transformer->drop)((*transformer->wte)(idx) + (*transformer->wpe)(pos));
  for (size_t i = 0; i < transformer->h->size(); ++i) {
    GPT2Block& block = *transformer->h->at<GPT2Block>(i);
    x = run_block([&block](const Tensor& h) { return block(h); }, x);
  }
  if (last_only) x = x.narrow(1, T - 1, 1);
  return (*lm_head)((*transformer->ln_f)(x));
}

}  // namespace tessera::models

namespace tessera::models {

InferenceLayout GPT2::inference_layout() const {
  InferenceLayout out;
  out.dim = config.n_embd;
  out.n_heads = out.n_kv_heads = config.n_head;
  out.hidden = 4 * config.n_embd;
  out.max_seq_len = config.block_size;
  out.eps = config.layer_norm_eps;
  out.token_embedding = transformer->wte->weight;
  out.position_embedding = transformer->wpe->weight;
  auto linear = [](const nn::Linear& l) { return InferenceLayout::Linear{{l.weight}, {l.bias}}; };
  auto norm = [](const nn::LayerNorm& n) { return InferenceLayout::NormWeights{n.weight, n.bias}; };
  for (size_t i = 0; i < transformer->h->size(); ++i) {
    const GPT2Block& b = *transformer->h->at<GPT2Block>(i);
    out.layers.push_back({norm(*b.ln_1), norm(*b.ln_2), linear(*b.attn->c_attn),
                          linear(*b.attn->c_proj), linear(*b.mlp->c_fc), linear(*b.mlp->c_proj)});
  }
  out.final_norm = norm(*transformer->ln_f);
  out.lm_head = lm_head->weight;
  return out;
}

}  // namespace tessera::models

#include "tessera/models/gpt2.h"

#include <cmath>
#include <utility>

#include "tensor_parallel_sharding.h"
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
  Tensor fused = (*c_attn)(x);
  TensorList qkv = split(fused, fused.size(-1) / 3, /*dim=*/-1);  // [B, T, C] each (C / tp)
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

Tensor GPT2MLP::forward(const Tensor& x) {
  // c_fc and its GELU in one call (a GEMM epilogue on CUDA) unless hooks watch c_fc's output.
  const Tensor h =
      c_fc->has_forward_hooks() ? gelu((*c_fc)(x), "tanh") : c_fc->forward_gelu(x, "tanh");
  return (*dropout)((*c_proj)(h));
}

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

Tensor GPT2::embed(const Tensor& idx) {
  check_input(idx, "GPT2");
  const int64_t T = idx.size(1);
  Tensor x = (*transformer->wte)(idx);  // under sequence parallelism, this rank's positions
  const int64_t start = sequence_offset(T);
  Tensor pos = arange(start, start + x.size(1));
  if (idx.device() != pos.device()) pos = pos.to(idx.device());
  return (*transformer->drop)(x + (*transformer->wpe)(pos));
}

Tensor GPT2::layers(const Tensor& x, int64_t begin, int64_t end) {
  Tensor h = x;
  for (int64_t i = begin; i < end; ++i) {
    GPT2Block& block = *transformer->h->at<GPT2Block>(i);
    h = run_block([&block](const Tensor& in) { return block(in); }, h);
  }
  return h;
}

std::vector<std::string> GPT2::stage_module_paths(int64_t begin, int64_t end) const {
  std::vector<std::string> paths;
  if (begin == 0)
    paths.insert(paths.end(), {"transformer.wte", "transformer.wpe", "transformer.drop"});
  for (int64_t i = begin; i < end; ++i) paths.push_back("transformer.h." + std::to_string(i));
  if (end == n_layers()) paths.insert(paths.end(), {"transformer.ln_f", "lm_head"});
  return paths;
}

Tensor GPT2::head(const Tensor& x) { return (*lm_head)((*transformer->ln_f)(x)); }

void GPT2::shard_layers(const std::shared_ptr<dist::ProcessGroup>& group, bool sequence_parallel) {
  const int n = group->size();
  TESSERA_CHECK(config.n_head % n == 0, ValueError,
                "[GPT2.shard_tensor_parallel] expected n_head divisible by the group size ", n,
                ", got ", config.n_head);
  TESSERA_CHECK(config.dropout == 0.0, ValueError,
                "[GPT2.shard_tensor_parallel] expected dropout 0 (tensor-parallel dropout needs "
                "per-rank random streams, not built yet), got ",
                config.dropout);
  const dist::ColumnInput input = detail::column_input(sequence_parallel);
  const int64_t C = config.n_embd;
  for (size_t i = 0; i < transformer->h->size(); ++i) {
    GPT2Block& b = *transformer->h->at<GPT2Block>(i);
    GPT2Attention& attn = *b.attn;
    attn.c_attn = attn.replace_module(
        "c_attn",
        detail::column_parallel(*attn.c_attn, group, {.input = input, .fused_parts = {C, C, C}}));
    attn.c_proj =
        attn.replace_module("c_proj", detail::row_parallel(*attn.c_proj, group, sequence_parallel));
    attn.n_head /= n;
    b.mlp->c_fc = b.mlp->replace_module(
        "c_fc", detail::column_parallel(*b.mlp->c_fc, group, {.input = input, .fused_parts = {}}));
    b.mlp->c_proj = b.mlp->replace_module(
        "c_proj", detail::row_parallel(*b.mlp->c_proj, group, sequence_parallel));
  }
  detail::VocabParallelPair vocab = detail::vocab_parallel(*transformer->wte, *lm_head,
                                                           /*tied=*/true, group, sequence_parallel);
  transformer->wte = transformer->replace_module("wte", vocab.embedding);
  lm_head = replace_module("lm_head", vocab.head);
}

}  // namespace tessera::models

namespace tessera::models {

InferenceLayout GPT2::inference_layout() const {
  check_whole("inference_layout");
  InferenceLayout out;
  out.dim = config.n_embd;
  out.n_heads = out.n_kv_heads = config.n_head;
  out.hidden = 4 * config.n_embd;
  out.max_seq_len = config.block_size;
  out.eps = config.layer_norm_eps;
  out.token_embedding = transformer->wte->weight;
  out.position_embedding = transformer->wpe->weight;
  auto norm = [](const nn::LayerNorm& n) { return InferenceLayout::NormWeights{n.weight, n.bias}; };
  for (size_t i = 0; i < transformer->h->size(); ++i) {
    const GPT2Block& b = *transformer->h->at<GPT2Block>(i);
    const std::string prefix = tessera::detail::str("transformer.h.", i, ".");
    auto linear = [&](const nn::Linear& l, const char* name) {
      return InferenceLayout::Linear{{l.weight}, {l.bias}, {prefix + name}};
    };
    InferenceLayout::Layer& layer = out.layers.emplace_back();
    layer.norm1 = norm(*b.ln_1);
    layer.norm2 = norm(*b.ln_2);
    layer.qkv = linear(*b.attn->c_attn, "attn.c_attn");
    layer.o = linear(*b.attn->c_proj, "attn.c_proj");
    layer.fc1 = linear(*b.mlp->c_fc, "mlp.c_fc");
    layer.fc2 = linear(*b.mlp->c_proj, "mlp.c_proj");
  }
  out.final_norm = norm(*transformer->ln_f);
  out.lm_head = lm_head->weight;
  return out;
}

}  // namespace tessera::models

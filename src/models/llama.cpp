#include "tessera/models/llama.h"

#include <utility>

#include "tensor_parallel_sharding.h"
#include "tessera/nn/init.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/reduce.h"
#include "tessera/ops/shape.h"
#include "tessera/ops/sort.h"

namespace tessera::models {
namespace {

std::shared_ptr<nn::Linear> linear(int64_t in, int64_t out, bool bias = false) {
  return std::make_shared<nn::Linear>(in, out, bias);
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& config)
    : n_heads(config.n_heads), n_kv_heads(config.n_kv_heads), head_dim(config.head_dim()) {
  const bool qkv_bias = config.qkv_bias || config.attention_bias;
  q_proj = register_module("q_proj", linear(config.dim, n_heads * head_dim, qkv_bias));
  k_proj = register_module("k_proj", linear(config.dim, n_kv_heads * head_dim, qkv_bias));
  v_proj = register_module("v_proj", linear(config.dim, n_kv_heads * head_dim, qkv_bias));
  o_proj = register_module("o_proj", linear(n_heads * head_dim, config.dim, config.attention_bias));
  if (config.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<nn::RMSNorm>(head_dim, config.norm_eps));
    k_norm = register_module("k_norm", std::make_shared<nn::RMSNorm>(head_dim, config.norm_eps));
  }
}

Tensor LlamaAttention::forward(const Tensor& x_in, const Tensor& cos, const Tensor& sin) {
  const Tensor x = tp ? detail::enter_column_region(x_in, tp, sequence_parallel) : x_in;
  Tensor q = split_heads((*q_proj)(x), n_heads);
  Tensor k = split_heads((*k_proj)(x), n_kv_heads);
  if (q_norm) {  // over each head's features, before the rotation
    q = (*q_norm)(q);
    k = (*k_norm)(k);
  }
  q = rope(q, cos, sin);
  k = rope(k, cos, sin);
  Tensor v = split_heads((*v_proj)(x), n_kv_heads);
  return (*o_proj)(merge_heads(causal_attention(q, k, v)));
}

LlamaMLP::LlamaMLP(const LlamaConfig& config) {
  gate_proj = register_module("gate_proj", linear(config.dim, config.hidden_dim));
  up_proj = register_module("up_proj", linear(config.dim, config.hidden_dim));
  down_proj = register_module("down_proj", linear(config.hidden_dim, config.dim));
}

Tensor LlamaMLP::forward(const Tensor& x_in) {
  const Tensor x = tp ? detail::enter_column_region(x_in, tp, sequence_parallel) : x_in;
  return (*down_proj)(swiglu((*gate_proj)(x), (*up_proj)(x)));
}

MixtralExpert::MixtralExpert(const LlamaConfig& config) {
  w1 = register_module("w1", linear(config.dim, config.hidden_dim));
  w2 = register_module("w2", linear(config.hidden_dim, config.dim));
  w3 = register_module("w3", linear(config.dim, config.hidden_dim));
}

Tensor MixtralExpert::forward(const Tensor& x) { return (*w2)(swiglu((*w1)(x), (*w3)(x))); }

MixtralSparseMoe::MixtralSparseMoe(const LlamaConfig& config)
    : n_experts(config.n_experts),
      top_k(config.n_experts_per_token),
      norm_topk_prob(config.norm_topk_prob) {
  gate = register_module("gate", linear(config.dim, n_experts));
  experts = register_module("experts", std::make_shared<nn::ModuleList>());
  for (int64_t e = 0; e < n_experts; ++e) {
    if (config.qwen_moe)
      experts->push_back(std::make_shared<LlamaMLP>(config));
    else
      experts->push_back(std::make_shared<MixtralExpert>(config));
  }
}

Tensor MixtralSparseMoe::forward(const Tensor& x) {
  const Tensor flat = x.reshape({-1, x.size(-1)});
  const int64_t N = flat.size(0);
  if (N == 0) return zeros_like(x);
  // Routing in float32 at least, whatever the activations (Hugging Face's dtype=torch.float).
  const Tensor scores = (*gate)(flat);
  const Tensor probs = softmax(scores.dtype() == kFloat64 ? scores : scores.to(kFloat32), -1);
  auto [top_probs, top_ids] = topk(probs, top_k, -1);
  const Tensor weights =
      (norm_topk_prob ? top_probs / sum(top_probs, {-1}, /*keepdim=*/true) : top_probs)
          .to(flat.dtype());

  // The picks grouped by expert, rows in order within each (a counting sort read on the host),
  // so the rows are gathered once and every expert runs once over its own contiguous slice.
  const Tensor ids = top_ids.to(kCPU).contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  std::vector<int64_t> first(n_experts + 1, 0);
  for (int64_t i = 0; i < N * top_k; ++i) ++first[id[i] + 1];
  for (int64_t e = 0; e < n_experts; ++e) first[e + 1] += first[e];
  std::vector<int64_t> next(first.begin(), first.end() - 1), rows(N * top_k), place(N * top_k);
  for (int64_t i = 0; i < N * top_k; ++i) {
    place[i] = next[id[i]]++;  // pick i (row i / top_k, slot i % top_k) in the grouped order
    rows[place[i]] = i / top_k;
  }
  const Tensor gathered = index_select(flat, 0, tensor(rows).to(flat.device()));
  TensorList outputs;
  last_stats = {sum(probs, {0}), std::vector<int64_t>(n_experts), N};
  for (int64_t e = 0; e < n_experts; ++e) {
    last_stats.picks[e] = first[e + 1] - first[e];
    if (last_stats.picks[e] > 0)
      outputs.push_back(
          (*experts->at<nn::UnaryModule>(e))(gathered.narrow(0, first[e], last_stats.picks[e])));
  }
  // Back in (row, slot) order, weighted, and summed over each row's slots.
  const Tensor y = index_select(cat(outputs, 0), 0, tensor(place).to(flat.device()));
  const Tensor out = sum((y * weights.reshape({-1, 1})).reshape({N, top_k, -1}), {1});
  return out.to(flat.dtype()).reshape(x.sizes());
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& config) {
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(config));
  if (config.mixture_of_experts())
    block_sparse_moe = register_module(config.qwen_moe ? "mlp" : "block_sparse_moe",
                                       std::make_shared<MixtralSparseMoe>(config));
  else
    mlp = register_module("mlp", std::make_shared<LlamaMLP>(config));
  input_layernorm = register_module("input_layernorm",
                                    std::make_shared<nn::RMSNorm>(config.dim, config.norm_eps));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", std::make_shared<nn::RMSNorm>(config.dim, config.norm_eps));
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  Tensor h = x + self_attn->forward((*input_layernorm)(x), cos, sin);
  const Tensor normed = (*post_attention_layernorm)(h);
  return h + (mlp ? (*mlp)(normed) : (*block_sparse_moe)(normed));
}

LlamaModel::LlamaModel(const LlamaConfig& config) {
  embed_tokens = register_module("embed_tokens",
                                 std::make_shared<nn::Embedding>(config.vocab_size, config.dim));
  layers = register_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config.n_layers; ++i)
    layers->push_back(std::make_shared<LlamaDecoderLayer>(config));
  norm = register_module("norm", std::make_shared<nn::RMSNorm>(config.dim, config.norm_eps));
  rotary_emb = register_module(
      "rotary_emb", std::make_shared<RotaryEmbedding>(config.head_dim(), config.max_seq_len,
                                                      config.rope_theta, config.rope_scaling));
}

Llama::Llama(LlamaConfig cfg, Generator* gen) : config(std::move(cfg)) {
  config.validate();
  model = register_module("model", std::make_shared<LlamaModel>(config));
  lm_head = register_module("lm_head", linear(config.dim, config.vocab_size));
  if (config.tie_embeddings)
    lm_head->weight = lm_head->replace_parameter("weight", model->embed_tokens->weight);
  reset_parameters(gen);
}

void Llama::reset_parameters(Generator* gen) {
  apply([&](nn::Module& m) {
    if (config.tie_embeddings && &m == lm_head.get()) return;  // drawn through embed_tokens
    if (auto* l = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::normal_(l->weight, 0.0, 0.02, gen);
      if (l->bias.defined()) nn::init::zeros_(l->bias);
    } else if (auto* e = dynamic_cast<nn::Embedding*>(&m)) {
      nn::init::normal_(e->weight, 0.0, 0.02, gen);
    } else if (auto* n = dynamic_cast<nn::RMSNorm*>(&m)) {
      nn::init::ones_(n->weight);
    }
  });
}

Tensor Llama::embed(const Tensor& idx) {
  check_input(idx, "Llama");
  return (*model->embed_tokens)(idx);
}

Tensor Llama::layers(const Tensor& x, int64_t begin, int64_t end) {
  // RoPE runs inside attention, on the whole sequence even under sequence parallelism.
  // Named tensors, not a structured binding: clang 14 (the fuzz build) cannot capture those.
  const auto tables = model->rotary_emb->tables(0, sequence_length(x));
  const Tensor cos = std::get<0>(tables), sin = std::get<1>(tables);
  Tensor h = x;
  for (int64_t i = begin; i < end; ++i) {
    LlamaDecoderLayer& layer = *model->layers->at<LlamaDecoderLayer>(i);
    h = run_block([&layer, cos, sin](const Tensor& in) { return layer.forward(in, cos, sin); }, h);
  }
  return h;
}

std::vector<std::string> Llama::stage_module_paths(int64_t begin, int64_t end) const {
  std::vector<std::string> paths{"model.rotary_emb"};
  if (begin == 0) paths.insert(paths.end(), {"model.embed_tokens"});
  for (int64_t i = begin; i < end; ++i) paths.push_back("model.layers." + std::to_string(i));
  if (end == n_layers()) paths.insert(paths.end(), {"model.norm", "lm_head"});
  return paths;
}

Tensor Llama::head(const Tensor& x) { return (*lm_head)((*model->norm)(x)); }

Tensor Llama::auxiliary_loss() const {
  if (!has_auxiliary_loss() || !is_training()) return {};
  // The checkpointed first pass runs without autograd: its router statistics cannot carry the
  // loss's gradient.
  TESSERA_CHECK(!activation_checkpointing(), NotImplementedError,
                "[Llama.loss] expected activation checkpointing off when the router's "
                "load-balancing loss trains (router_aux_loss_coef ",
                config.router_aux_loss_coef, "); set router_aux_loss_coef 0 or turn it off");
  // Every layer's tokens pooled, as Hugging Face concatenates the layers' router logits.
  Tensor prob_sum;
  std::vector<double> picks(config.n_experts, 0.0);
  int64_t tokens = 0;
  for (size_t i = 0; i < model->layers->size(); ++i) {
    const auto& stats = model->layers->at<LlamaDecoderLayer>(i)->block_sparse_moe->last_stats;
    if (!stats.prob_sum.defined()) return {};  // no forward yet
    prob_sum = prob_sum.defined() ? prob_sum + stats.prob_sum : stats.prob_sum;
    for (int64_t e = 0; e < config.n_experts; ++e) picks[e] += static_cast<double>(stats.picks[e]);
    tokens += stats.tokens;
  }
  // n_experts * sum_e (picks_e / tokens) * (prob_sum_e / tokens), times the coefficient.
  const double scale = config.router_aux_loss_coef * static_cast<double>(config.n_experts) /
                       (static_cast<double>(tokens) * static_cast<double>(tokens));
  const Tensor f = tensor(picks).to(prob_sum.dtype()).to(prob_sum.device());
  return sum(prob_sum * f) * scale;
}

void Llama::shard_layers(const std::shared_ptr<dist::ProcessGroup>& group, bool sequence_parallel) {
  const int n = group->size();
  TESSERA_CHECK(!config.mixture_of_experts(), NotImplementedError,
                "[Llama.shard_tensor_parallel] expected a dense model (tensor parallelism of a "
                "mixture of experts is not implemented), got ",
                config.n_experts, " experts");
  // Each rank norms its own heads with the shared weights, whose gradients would need a sum over
  // the group that ParallelGradients does not take.
  TESSERA_CHECK(!config.qk_norm, NotImplementedError,
                "[Llama.shard_tensor_parallel] expected no query/key norms (tensor parallelism of "
                "Qwen3's qk_norm is not implemented)");
  TESSERA_CHECK(config.n_heads % n == 0 && config.n_kv_heads % n == 0, ValueError,
                "[Llama.shard_tensor_parallel] expected n_heads and n_kv_heads divisible by the "
                "group size ",
                n, ", got ", config.n_heads, " and ", config.n_kv_heads);
  const dist::ColumnParallelOptions in_region{.input = dist::ColumnInput::InRegion,
                                              .fused_parts = {}};
  for (size_t i = 0; i < model->layers->size(); ++i) {
    LlamaDecoderLayer& layer = *model->layers->at<LlamaDecoderLayer>(i);
    LlamaAttention& a = *layer.self_attn;
    a.q_proj = a.replace_module("q_proj", detail::column_parallel(*a.q_proj, group, in_region));
    a.k_proj = a.replace_module("k_proj", detail::column_parallel(*a.k_proj, group, in_region));
    a.v_proj = a.replace_module("v_proj", detail::column_parallel(*a.v_proj, group, in_region));
    a.o_proj =
        a.replace_module("o_proj", detail::row_parallel(*a.o_proj, group, sequence_parallel));
    a.n_heads /= n;
    a.n_kv_heads /= n;
    a.tp = group;
    a.sequence_parallel = sequence_parallel;
    LlamaMLP& m = *layer.mlp;
    m.gate_proj =
        m.replace_module("gate_proj", detail::column_parallel(*m.gate_proj, group, in_region));
    m.up_proj = m.replace_module("up_proj", detail::column_parallel(*m.up_proj, group, in_region));
    m.down_proj =
        m.replace_module("down_proj", detail::row_parallel(*m.down_proj, group, sequence_parallel));
    m.tp = group;
    m.sequence_parallel = sequence_parallel;
  }
  detail::VocabParallelPair vocab = detail::vocab_parallel(
      *model->embed_tokens, *lm_head, config.tie_embeddings, group, sequence_parallel);
  model->embed_tokens = model->replace_module("embed_tokens", vocab.embedding);
  lm_head = replace_module("lm_head", vocab.head);
}

}  // namespace tessera::models

namespace tessera::models {

InferenceLayout Llama::inference_layout() const {
  check_whole("inference_layout");
  InferenceLayout out;
  out.norm = InferenceLayout::Norm::kRMSNorm;
  out.mlp = InferenceLayout::Mlp::kSwiGLU;
  out.dim = config.dim;
  out.n_heads = config.n_heads;
  out.n_kv_heads = config.n_kv_heads;
  out.head_dim = config.head_dim();
  out.hidden = config.hidden_dim;
  out.max_seq_len = config.max_seq_len;
  out.experts_per_token = config.mixture_of_experts() ? config.n_experts_per_token : 0;
  out.renormalize_experts = config.norm_topk_prob;
  out.eps = config.norm_eps;
  out.token_embedding = model->embed_tokens->weight;
  out.rope_cos = model->rotary_emb->cos;
  out.rope_sin = model->rotary_emb->sin;
  for (size_t i = 0; i < model->layers->size(); ++i) {
    const LlamaDecoderLayer& b = *model->layers->at<LlamaDecoderLayer>(i);
    const LlamaAttention& a = *b.self_attn;
    const std::string prefix = tessera::detail::str("model.layers.", i, ".");
    auto weights = [&](std::initializer_list<std::pair<const nn::Linear*, const char*>> ls) {
      InferenceLayout::Linear l;
      bool biased = false;
      for (const auto& [p, name] : ls) {
        l.weights.push_back(p->weight);
        l.biases.push_back(p->bias);  // undefined: none
        l.names.push_back(prefix + name);
        biased = biased || p->bias.defined();
      }
      if (!biased) l.biases.clear();
      return l;
    };
    InferenceLayout::Layer& layer = out.layers.emplace_back();
    layer.norm1 = {b.input_layernorm->weight, Tensor()};
    layer.norm2 = {b.post_attention_layernorm->weight, Tensor()};
    layer.qkv = weights({{a.q_proj.get(), "self_attn.q_proj"},
                         {a.k_proj.get(), "self_attn.k_proj"},
                         {a.v_proj.get(), "self_attn.v_proj"}});
    layer.o = weights({{a.o_proj.get(), "self_attn.o_proj"}});
    if (a.q_norm) {
      layer.q_norm = {a.q_norm->weight, Tensor()};
      layer.k_norm = {a.k_norm->weight, Tensor()};
    }
    if (b.mlp) {
      layer.fc1 = weights(
          {{b.mlp->gate_proj.get(), "mlp.gate_proj"}, {b.mlp->up_proj.get(), "mlp.up_proj"}});
      layer.fc2 = weights({{b.mlp->down_proj.get(), "mlp.down_proj"}});
      continue;
    }
    const MixtralSparseMoe& moe = *b.block_sparse_moe;
    const std::string block = config.qwen_moe ? "mlp." : "block_sparse_moe.";
    layer.router = weights({{moe.gate.get(), (block + "gate").c_str()}});
    for (int64_t e = 0; e < moe.n_experts; ++e) {
      const std::string name = tessera::detail::str(block, "experts.", e, ".");
      auto expert = [&](const nn::Linear& gate, const nn::Linear& up, const nn::Linear& down,
                        const char* g, const char* u, const char* d) {
        layer.experts.push_back({weights({{&gate, (name + g).c_str()}, {&up, (name + u).c_str()}}),
                                 weights({{&down, (name + d).c_str()}})});
      };
      if (config.qwen_moe) {
        const LlamaMLP& x = *moe.experts->at<LlamaMLP>(e);
        expert(*x.gate_proj, *x.up_proj, *x.down_proj, "gate_proj", "up_proj", "down_proj");
      } else {
        const MixtralExpert& x = *moe.experts->at<MixtralExpert>(e);
        expert(*x.w1, *x.w3, *x.w2, "w1", "w3", "w2");
      }
    }
  }
  out.final_norm = {model->norm->weight, Tensor()};
  out.lm_head = lm_head->weight;
  return out;
}

}  // namespace tessera::models

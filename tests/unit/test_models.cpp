// GPT-2 and LLaMA: configs (presets, JSON, validation), state-dict names, weight tying,
// init statistics, forward/last-position logits, loss, input checks, the attention composite path
// and Llama-3 RoPE scaling. Parity with PyTorch is in tests/e2e/test_models_vs_torch.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/small_models.h"

namespace tessera {
namespace {

using models::GPT2Config;
using models::LlamaConfig;

GPT2Config tiny_gpt2() {
  GPT2Config c;
  c.vocab_size = 50;
  c.block_size = 12;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

LlamaConfig tiny_llama(bool tied = false) {
  LlamaConfig c = LlamaConfig::from_name("llama-test");
  c.vocab_size = 40;
  c.dim = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 48;
  c.max_seq_len = 16;
  c.tie_embeddings = tied;
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.detach().to(kFloat64) - b.detach().to(kFloat64))).item<double>();
}

TEST(ModelConfig, PresetsJsonAndValidation) {
  GPT2Config xl = GPT2Config::from_name("gpt2-xl");
  EXPECT_EQ(xl.n_layer, 48);
  EXPECT_EQ(xl.n_head, 25);
  EXPECT_EQ(xl.n_embd, 1600);
  EXPECT_EQ(GPT2Config::from_name("d24").n_embd, GPT2Config::from_name("gpt2-medium").n_embd);
  EXPECT_EQ(GPT2Config::from_name("d6").n_embd, 384);
  EXPECT_EQ(GPT2Config::names().size(), 9u);
  EXPECT_TESSERA_ERROR(GPT2Config::from_name("gpt3"), ValueError, "gpt2-medium, gpt2-large");

  GPT2Config g = tiny_gpt2();
  g.dropout = 0.25;
  GPT2Config g2 = GPT2Config::from_json(g.to_json());
  EXPECT_EQ(g2.to_json(), g.to_json());
  EXPECT_EQ(GPT2Config::from_json(R"({"n_layer": 3})").n_embd, 768);
  EXPECT_TESSERA_ERROR(GPT2Config::from_json(R"({"n_layers": 3})"), ValueError, "'n_layers'");
  EXPECT_TESSERA_ERROR(GPT2Config::from_json(R"({"n_layer": "3"})"), ValueError, "a number");
  EXPECT_TESSERA_ERROR(GPT2Config::from_json(R"({"n_embd": 100, "n_head": 3})"), ValueError,
                       "divisible");
  EXPECT_TESSERA_ERROR(GPT2Config::from_json("[]"), ValueError, "JSON object");

  LlamaConfig l3 = LlamaConfig::from_name("llama3.1-8b");
  EXPECT_EQ(l3.n_kv_heads, 8);
  EXPECT_EQ(l3.rope_theta, 500000.0);
  ASSERT_TRUE(l3.rope_scaling.has_value());
  EXPECT_EQ(l3.rope_scaling->factor, 8.0);
  EXPECT_TRUE(LlamaConfig::from_name("stories260K").tie_embeddings);
  EXPECT_EQ(LlamaConfig::from_name("tinyllama-1.1b").n_kv_heads, 4);
  LlamaConfig back = LlamaConfig::from_json(l3.to_json());
  EXPECT_EQ(back.to_json(), l3.to_json());
  EXPECT_FALSE(LlamaConfig::from_json(LlamaConfig::from_name("llama2-7b").to_json()).rope_scaling);
  LlamaConfig bad = tiny_llama();
  bad.n_kv_heads = 3;
  EXPECT_TESSERA_ERROR(bad.validate(), ValueError, "n_kv_heads");
  EXPECT_TESSERA_ERROR(LlamaConfig::from_json(R"({"rope_scaling": {"factr": 2}})"), ValueError,
                       "'factr'");
  // Checkpoints written before rope_type existed meant Llama 3.1's rule.
  EXPECT_EQ(LlamaConfig::from_json(R"({"rope_scaling": {"factor": 2}})").rope_scaling->rope_type,
            "llama3");
  LlamaConfig yarn = tiny_llama();
  models::RopeScaling yarn_scaling;
  yarn_scaling.rope_type = "yarn";
  yarn_scaling.mscale = 0.7;
  yarn.rope_scaling = yarn_scaling;
  EXPECT_EQ(LlamaConfig::from_json(yarn.to_json()).to_json(), yarn.to_json());
  EXPECT_TESSERA_ERROR(LlamaConfig::from_json(R"({"rope_scaling": {"rope_type": "ntk"}})"),
                       ValueError, "rope_type llama3, linear or yarn, got 'ntk'");
  EXPECT_TESSERA_ERROR(LlamaConfig::from_json(R"({"rope_scaling": {"rope_type": 1}})"), ValueError,
                       "a string for 'rope_type'");
  EXPECT_TESSERA_ERROR(
      LlamaConfig::from_json(R"({"rope_scaling": {"rope_type": "yarn", "beta_slow": 0}})"),
      ValueError, "beta_slow > 0");
}

TEST(GPT2, NanoGptNamesTyingAndInit) {
  manual_seed(0);
  GPT2Config c = tiny_gpt2();
  auto model = std::make_shared<models::GPT2>(c);
  std::vector<std::string> keys = model->state_dict().keys();
  const std::vector<std::string> first = {"transformer.wte.weight",
                                          "transformer.wpe.weight",
                                          "transformer.h.0.ln_1.weight",
                                          "transformer.h.0.ln_1.bias",
                                          "transformer.h.0.attn.c_attn.weight",
                                          "transformer.h.0.attn.c_attn.bias",
                                          "transformer.h.0.attn.c_proj.weight",
                                          "transformer.h.0.attn.c_proj.bias",
                                          "transformer.h.0.ln_2.weight",
                                          "transformer.h.0.ln_2.bias",
                                          "transformer.h.0.mlp.c_fc.weight",
                                          "transformer.h.0.mlp.c_fc.bias",
                                          "transformer.h.0.mlp.c_proj.weight",
                                          "transformer.h.0.mlp.c_proj.bias"};
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 14), first);
  EXPECT_EQ(keys.size(), 2 + 2 * 12 + 2 + 1u);
  EXPECT_EQ(keys.back(), "lm_head.weight");
  EXPECT_EQ(model->state_dict().at("transformer.h.1.attn.c_attn.weight").sizes(), (Shape{48, 16}));
  EXPECT_TRUE(model->lm_head->weight.is_same(model->transformer->wte->weight));
  EXPECT_EQ(model->named_parameters().size(), keys.size() - 1) << "the tied weight counts once";
  // wte + wpe + per block 12 C^2 + 13 C + ln_f (gpt2: 124,439,808 by the same count).
  EXPECT_EQ(model->num_parameters(), 50 * 16 + 12 * 16 + 2 * (12 * 16 * 16 + 13 * 16) + 2 * 16);

  // nanoGPT init: std 0.02, residual projections 0.02 / sqrt(2 L), biases 0, LayerNorms 1.
  GPT2Config big = tiny_gpt2();
  big.n_embd = 128;
  big.n_head = 4;
  big.vocab_size = 512;
  auto m = std::make_shared<models::GPT2>(big);
  auto stdev = [](const Tensor& t) { return tessera::std(t.detach()).item<float>(); };
  EXPECT_NEAR(stdev(m->transformer->wte->weight), 0.02, 0.001);
  EXPECT_NEAR(stdev(m->transformer->h->at<models::GPT2Block>(0)->attn->c_attn->weight), 0.02,
              0.001);
  EXPECT_NEAR(stdev(m->transformer->h->at<models::GPT2Block>(1)->mlp->c_proj->weight), 0.01,
              0.0005);
  EXPECT_EQ(sum(abs(m->transformer->h->at<models::GPT2Block>(0)->attn->c_attn->bias)).item<float>(),
            0.0f);
}

template <class Model>
void check_forward(Model& model, int64_t V) {
  model.eval();
  Tensor idx = randint(0, V, {2, 7});
  Tensor logits = model(idx);
  ASSERT_EQ(logits.sizes(), (Shape{2, 7, V}));
  Tensor last = model(idx, /*last_only=*/true);
  ASSERT_EQ(last.sizes(), (Shape{2, 1, V}));
  EXPECT_LT(max_abs_diff(last, logits.narrow(1, 6, 1)), 1e-5);
  // Causality: changing the last token leaves earlier logits unchanged.
  Tensor idx2 = idx.clone();
  idx2.select(1, 6).fill_(0);
  EXPECT_LT(max_abs_diff(model(idx2).narrow(1, 0, 6), logits.narrow(1, 0, 6)), 1e-6);

  Tensor targets = randint(0, V, {2, 7});
  Tensor expected = cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
  EXPECT_NEAR(model.loss(idx, targets).template item<float>(), expected.item<float>(), 1e-5);
  targets.select(1, 0).fill_(-1);  // ignored positions
  Tensor masked =
      cross_entropy(logits.narrow(1, 1, 6).reshape({-1, V}), targets.narrow(1, 1, 6).reshape({-1}));
  EXPECT_NEAR(model.loss(idx, targets).template item<float>(), masked.item<float>(), 1e-5);

  EXPECT_TESSERA_ERROR(model(randint(0, V, {2, model.max_seq_len() + 1})), ValueError,
                       "sequence length in [1, ");
  EXPECT_TESSERA_ERROR(model(zeros({2, 3})), ValueError, "dtype int64");
  EXPECT_TESSERA_ERROR(model.loss(idx, zeros({2, 7}, kInt64).narrow(1, 0, 6)), ValueError,
                       "targets shaped like idx");
}

TEST(GPT2, ForwardLastOnlyLossAndChecks) {
  manual_seed(1);
  auto model = std::make_shared<models::GPT2>(tiny_gpt2());
  check_forward(*model, 50);
}

TEST(Llama, HuggingFaceNamesGqaAndTying) {
  manual_seed(2);
  auto model = std::make_shared<models::Llama>(tiny_llama());
  std::vector<std::string> keys = model->state_dict().keys();
  const std::vector<std::string> first = {"model.embed_tokens.weight",
                                          "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.self_attn.k_proj.weight",
                                          "model.layers.0.self_attn.v_proj.weight",
                                          "model.layers.0.self_attn.o_proj.weight",
                                          "model.layers.0.mlp.gate_proj.weight",
                                          "model.layers.0.mlp.up_proj.weight",
                                          "model.layers.0.mlp.down_proj.weight",
                                          "model.layers.0.input_layernorm.weight",
                                          "model.layers.0.post_attention_layernorm.weight"};
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 10), first);
  EXPECT_EQ(keys.size(), 1 + 2 * 9 + 2u) << "rotary tables stay out of the state dict";
  EXPECT_EQ(keys[keys.size() - 2], "model.norm.weight");
  EXPECT_EQ(model->state_dict().at("model.layers.1.self_attn.k_proj.weight").sizes(),
            (Shape{16, 32}));  // 2 KV heads of 8
  EXPECT_FALSE(model->lm_head->weight.is_same(model->model->embed_tokens->weight));
  check_forward(*model, 40);

  auto tied = std::make_shared<models::Llama>(tiny_llama(/*tied=*/true));
  EXPECT_TRUE(tied->lm_head->weight.is_same(tied->model->embed_tokens->weight));
  EXPECT_EQ(tied->named_parameters().size(), keys.size() - 1);
}

TEST(Llama, RopeScalingFollowsLlama31) {
  // theta 10000, D 16: wavelengths 2 pi * 10000^(2i/16) = 6.3, 19.9, 63, ... With an original
  // context of 40, low factor 1 and high 4 the bounds are 40 / 4 = 10 and 40 / 1 = 40: 6.3 is
  // kept, 19.9 smoothed, the longer ones divided by the factor.
  models::RopeScaling s{4.0, 1.0, 4.0, 40};
  std::vector<double> plain = models::rope_inv_freq(16, 10000.0);
  std::vector<double> scaled = models::rope_inv_freq(16, 10000.0, s);
  ASSERT_EQ(scaled.size(), 8u);
  EXPECT_DOUBLE_EQ(scaled[0], plain[0]);
  const double wavelen = 2 * std::numbers::pi / plain[1];
  const double smooth = (40.0 / wavelen - 1.0) / (4.0 - 1.0);
  EXPECT_DOUBLE_EQ(scaled[1], (1 - smooth) * plain[1] / 4.0 + smooth * plain[1]);
  for (size_t i = 2; i < 8; ++i) EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 4.0) << i;

  // Without scaling the tables equal rope_tables.
  models::RotaryEmbedding rot(16, 10, 10000.0);
  auto [cos, sin] = rope_tables(10, 16, 10000.0);
  EXPECT_LT(max_abs_diff(rot.cos, cos), 1e-7);
  EXPECT_LT(max_abs_diff(std::get<1>(rot.tables(2, 5)), sin.narrow(0, 2, 5)), 1e-7);
  EXPECT_TESSERA_ERROR(rot.tables(8, 3), IndexError, "max_seq_len 10");
}

TEST(Llama, RopeScalingLinearDividesEveryFrequency) {
  models::RopeScaling s;
  s.factor = 4.0;
  s.rope_type = "linear";
  std::vector<double> plain = models::rope_inv_freq(16, 10000.0);
  std::vector<double> scaled = models::rope_inv_freq(16, 10000.0, s);
  for (size_t i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 4.0) << i;
  EXPECT_EQ(models::rope_attention_factor(s), 1.0);
}

TEST(Llama, RopeScalingYarnRampsFromKeptToInterpolated) {
  // theta 10000, D 16, original context 2048: dimension i turns 2048 / (2 pi 10000^(2i/16))
  // times. 32 turns (beta_fast) fall at i = 16 ln(2048 / 64 pi) / (2 ln 10000) = 2.02, one turn
  // (beta_slow) at 5.03; truncated outwards to [2, 6]: i <= 2 kept, i >= 6 divided by the factor,
  // between a quarter more of the divided one per index.
  models::RopeScaling s = testing::yarn_scaling(4.0, 2048);
  std::vector<double> plain = models::rope_inv_freq(16, 10000.0);
  std::vector<double> scaled = models::rope_inv_freq(16, 10000.0, s);
  for (size_t i = 0; i <= 2; ++i) EXPECT_DOUBLE_EQ(scaled[i], plain[i]) << i;
  for (size_t i = 3; i <= 5; ++i) {
    const double ramp = (static_cast<double>(i) - 2.0) / 4.0;
    EXPECT_DOUBLE_EQ(scaled[i], ramp * plain[i] / 4.0 + (1 - ramp) * plain[i]) << i;
  }
  for (size_t i = 6; i < 8; ++i) EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 4.0) << i;
  // Untruncated, the ramp runs over [2.02, 5.03].
  s.truncate = false;
  const double low = 16 * std::log(2048 / (64 * std::numbers::pi)) / (2 * std::log(10000.0));
  const double high = 16 * std::log(2048 / (2 * std::numbers::pi)) / (2 * std::log(10000.0));
  const double ramp = (3.0 - low) / (high - low);
  EXPECT_NEAR(models::rope_inv_freq(16, 10000.0, s)[3],
              ramp * plain[3] / 4.0 + (1 - ramp) * plain[3], 1e-15);

  // The attention factor: 0.1 ln(factor) + 1, DeepSeek's ratio, or as given; it multiplies the
  // tables.
  EXPECT_DOUBLE_EQ(models::rope_attention_factor(s), 0.1 * std::log(4.0) + 1.0);
  s.mscale = 1.0;
  s.mscale_all_dim = 0.5;
  EXPECT_DOUBLE_EQ(models::rope_attention_factor(s),
                   (0.1 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0));
  s.attention_factor = 1.5;
  EXPECT_EQ(models::rope_attention_factor(s), 1.5);
  models::RotaryEmbedding rot(16, 10, 10000.0, s);
  std::vector<double> inv = models::rope_inv_freq(16, 10000.0, s);
  EXPECT_NEAR(rot.cos.data_ptr<float>()[3 * 8 + 5], 1.5 * std::cos(3 * inv[5]), 1e-6);
  EXPECT_NEAR(rot.sin.data_ptr<float>()[7 * 8 + 1], 1.5 * std::sin(7 * inv[1]), 1e-6);
}

TEST(Attention, DropoutPathMatchesFusedAttentionWithGqa) {
  manual_seed(3);
  Tensor q = randn({2, 4, 5, 8}), k = randn({2, 2, 5, 8}), v = randn({2, 2, 5, 8});
  Tensor fused = models::causal_attention(q, k, v);
  // p tiny: the composite path runs (training) but keeps every element.
  Tensor composite = models::causal_attention(q, k, v, 1e-12, /*training=*/true);
  EXPECT_LT(max_abs_diff(fused, composite), 1e-5);
  EXPECT_EQ(max_abs_diff(models::causal_attention(q, k, v, 0.5, /*training=*/false), fused), 0.0);
  Tensor dropped = models::causal_attention(q, k, v, 0.5, /*training=*/true);
  EXPECT_GT(max_abs_diff(dropped, fused), 1e-3);
  EXPECT_EQ(models::merge_heads(models::split_heads(randn({2, 3, 12}), 4)).sizes(),
            (Shape{2, 3, 12}));
}

}  // namespace
}  // namespace tessera

// LoRA: the branch of nn::Linear (starts unchanged, gradients checked in float64 against finite
// differences), apply_lora's targets and freezing, merge_lora against the unmerged forward, and
// PEFT adapter folders written and read back (and refused when they ask for what is not applied).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/io/lora_adapter.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/gradcheck.h"
#include "testing/small_models.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Gives every LoRA branch of model a nonzero lora_B, so the branches change the output.
void randomize_lora_b(nn::Module& model) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : nn::lora_state_dict(model))
    if (name.ends_with("lora_B.weight")) t.copy_(randn(t.sizes()) * 0.1);
}

TEST(Lora, BranchStartsAsTheLayerAndAddsScaledLowRankProduct) {
  manual_seed(1);
  auto owned = std::make_shared<nn::Linear>(6, 5);  // lora_state_dict walks named_modules
  nn::Linear& layer = *owned;
  Tensor x = randn({3, 6});
  const Tensor before = layer(x).detach();
  layer.add_lora(2, /*scaling=*/1.5);
  EXPECT_EQ(layer.lora_A->weight.sizes(), (Shape{2, 6}));
  EXPECT_EQ(layer.lora_B->weight.sizes(), (Shape{5, 2}));
  EXPECT_TRUE(allclose(layer(x), before));  // lora_B starts at zero
  randomize_lora_b(layer);
  const Tensor want =
      before + matmul(matmul(x, layer.lora_A->weight.t()), layer.lora_B->weight.t()) * 1.5;
  EXPECT_TRUE(allclose(layer(x), want, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(layer.forward_gelu(x, "tanh"), gelu(want, "tanh"), 1e-5, 1e-6));
  const auto names = layer.state_dict().keys();
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"}));
  EXPECT_TESSERA_ERROR(layer.add_lora(2, 1.0), ValueError, "[Linear.add_lora]");
  nn::Linear other(4, 4);
  EXPECT_TESSERA_ERROR(other.add_lora(0, 1.0), ValueError, "rank");
  EXPECT_TESSERA_ERROR(other.add_lora(2, 1.0, 1.0), ValueError, "dropout");
}

TEST(Lora, GradientsMatchFiniteDifferencesInFloat64) {
  manual_seed(2);
  auto layer = std::make_shared<nn::Linear>(5, 4);
  layer->to(kFloat64);
  layer->add_lora(3, 0.75);
  randomize_lora_b(*layer);
  Tensor x = randn({2, 5}, kFloat64).requires_grad_();
  Tensor a = layer->lora_A->weight, b = layer->lora_B->weight, w = layer->weight;
  w.requires_grad_(true);
  const std::string err = testing::gradcheck(
      [&](const TensorList& in) {
        // The inputs are the layer's own tensors (checked in place), so the module runs as is.
        return TensorList{(*layer)(in[0])};
      },
      {x, a, b, w});
  EXPECT_EQ(err, "");
}

TEST(Lora, DropoutActsOnTheBranchInputOnlyWhileTraining) {
  manual_seed(3);
  auto owned = std::make_shared<nn::Linear>(8, 8);
  nn::Linear& layer = *owned;
  layer.add_lora(4, 2.0, /*dropout=*/0.5);
  randomize_lora_b(layer);
  Tensor x = randn({16, 8});
  layer.eval();
  const Tensor eval_out = layer(x);
  EXPECT_TRUE(allclose(layer(x), eval_out));
  layer.train();
  EXPECT_FALSE(allclose(layer(x), eval_out));
}

TEST(Lora, ApplyTargetsLayersByNameSuffixAllLinearOrRegexAndFreezesTheRest) {
  auto names_of = [](nn::LoraConfig c) {
    auto model = testing::small_gpt2();
    return nn::apply_lora(*model, c);
  };
  const std::vector<std::string> c_attn = names_of({.r = 2, .target_modules = {"c_attn"}});
  ASSERT_EQ(c_attn.size(), 2u);
  EXPECT_EQ(c_attn[0], "transformer.h.0.attn.c_attn");
  // all-linear: every block's four Linear layers, never the tied head.
  const auto all = names_of({.r = 2, .target_modules = {"all-linear"}});
  EXPECT_EQ(all.size(), 8u);
  for (const std::string& n : all) EXPECT_EQ(n.find("lm_head"), std::string::npos);
  const auto regex = names_of({.r = 2, .target_regex = R"(.*\.h\.1\.mlp\.c_(fc|proj))"});
  EXPECT_EQ(regex,
            (std::vector<std::string>{"transformer.h.1.mlp.c_fc", "transformer.h.1.mlp.c_proj"}));

  auto model = testing::small_gpt2();
  nn::apply_lora(*model, {.r = 4, .lora_alpha = 8, .target_modules = {"c_attn", "c_proj"}});
  int64_t trainable = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    const bool lora = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), lora) << name;
    trainable += lora;
  }
  EXPECT_EQ(trainable, 2 * 2 * 3);  // 2 layers x (attn.c_attn, attn.c_proj, mlp.c_proj) x A, B
  EXPECT_EQ(nn::lora_state_dict(*model).size(), 12u);
  EXPECT_TESSERA_ERROR(nn::apply_lora(*model, {.r = 2, .target_modules = {"c_fc"}}), ValueError,
                       "without LoRA");
  auto bad_regex = testing::small_gpt2();
  EXPECT_TESSERA_ERROR(nn::apply_lora(*bad_regex, {.r = 2, .target_regex = "c_(attn"}), ValueError,
                       "regular expression");
  auto fresh = testing::small_gpt2();
  EXPECT_TESSERA_ERROR(nn::apply_lora(*fresh, {.r = 2, .target_modules = {"q_proj"}}), ValueError,
                       "transformer.h.0.attn.c_attn");
}

TEST(Lora, MergedWeightsGiveTheBranchesOutput) {
  for (const bool llama : {false, true}) {
    manual_seed(4);
    auto tuned = llama ? testing::small_llama() : testing::small_gpt2();
    nn::LoraConfig config{.r = 3, .lora_alpha = 6, .target_modules = {"all-linear"}};
    nn::apply_lora(*tuned, config);
    randomize_lora_b(*tuned);
    tuned->eval();
    auto base = llama ? testing::small_llama() : testing::small_gpt2();
    nn::TensorDict base_state;
    for (const auto& [k, t] : tuned->state_dict())
      if (k.find(".lora_") == std::string::npos) base_state.insert(k, t);
    base->load_state_dict(base_state);
    base->eval();
    Tensor idx = randint(0, tuned->vocab_size(), {2, 7});
    const Tensor want = (*tuned)(idx);
    EXPECT_FALSE(allclose((*base)(idx), want, 1e-3, 1e-3)) << "the adapter changes the output";
    nn::merge_lora(*base, {config, nn::lora_state_dict(*tuned)});
    EXPECT_TRUE(allclose((*base)(idx), want, 1e-4, 1e-5)) << (llama ? "llama" : "gpt2");
  }
}

TEST(Lora, MergeRefusesAdaptersThatDoNotFitAndChangesNothing) {
  auto model = testing::small_gpt2();
  const Tensor weight = model->state_dict().at("transformer.h.0.attn.c_attn.weight");
  const Tensor w = weight.clone();
  const int64_t C = w.size(1);
  nn::LoraConfig c{.r = 2, .target_modules = {"c_attn"}};
  auto adapter = [&](std::string layer, Shape a, Shape b) {
    return nn::LoraAdapter{
        c, {{layer + ".lora_A.weight", randn(a)}, {layer + ".lora_B.weight", randn(b)}}};
  };
  const std::string layer0 = "transformer.h.0.attn.c_attn";
  auto good = adapter(layer0, {2, C}, {3 * C, 2});
  auto missing = adapter("transformer.h.9.attn.c_attn", {2, C}, {3 * C, 2});
  for (auto& [k, t] : missing.weights) good.weights.insert(k, t);
  EXPECT_TESSERA_ERROR(nn::merge_lora(*model, good), ValueError, "transformer.h.9.attn.c_attn");
  EXPECT_TRUE(allclose(weight, w, 0, 0)) << "nothing merged";
  EXPECT_TESSERA_ERROR(nn::merge_lora(*model, adapter(layer0, {2, C + 1}, {3 * C, 2})), ValueError,
                       "lora_A [r, " + std::to_string(C) + "]");
  EXPECT_TESSERA_ERROR(nn::merge_lora(*model, adapter(layer0, {2, C}, {3 * C, 3})), ValueError,
                       "of one rank");
  EXPECT_TESSERA_ERROR(nn::merge_lora(*model, adapter("transformer.h.0.ln_1", {2, C}, {C, 2})),
                       ValueError, "to be a Linear");
  nn::LoraAdapter lone{c, {{layer0 + ".lora_A.weight", randn({2, C})}}};
  EXPECT_TESSERA_ERROR(nn::merge_lora(*model, lone), ValueError, "only lora_A");
  nn::LoraAdapter odd{c, {{layer0 + ".weight", randn({2, C})}}};
  EXPECT_TESSERA_ERROR(nn::merge_lora(*model, odd), ValueError, "only <layer>.lora_A.weight");
}

TEST(Lora, AdapterFolderRoundTripsInPeftLayout) {
  testing::TempDir dir;
  auto model = testing::small_llama();
  nn::LoraConfig config{.r = 4,
                        .lora_alpha = 16,
                        .lora_dropout = 0.05,
                        .target_modules = {"q_proj", "v_proj"},
                        .use_rslora = true};
  nn::apply_lora(*model, config);
  randomize_lora_b(*model);
  io::save_lora_adapter(dir.file("adapter"), {config, nn::lora_state_dict(*model)}, "base/path");
  // PEFT's key prefix in the file, stripped on reading.
  const auto file = io::load_safetensors(dir.file("adapter/adapter_model.safetensors"));
  EXPECT_TRUE(
      file.tensors.contains("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  const nn::LoraAdapter back = io::load_lora_adapter(dir.file("adapter"));
  EXPECT_EQ(back.config.r, 4);
  EXPECT_DOUBLE_EQ(back.config.lora_alpha, 16);
  EXPECT_DOUBLE_EQ(back.config.scaling(), 8.0);  // rsLoRA: 16 / sqrt(4)
  EXPECT_EQ(back.config.target_modules, config.target_modules);
  ASSERT_EQ(back.weights.size(), nn::lora_state_dict(*model).size());
  for (const auto& [k, t] : nn::lora_state_dict(*model))
    EXPECT_TRUE(allclose(back.weights.at(k), t, 0, 0)) << k;
  const nn::LoraAdapter by_file = io::load_lora_adapter(dir.file("adapter/adapter_config.json"));
  EXPECT_EQ(by_file.weights.size(), back.weights.size());
}

TEST(Lora, LoadRefusesAdaptersItWouldNotApplyFaithfully) {
  testing::TempDir dir;
  auto model = testing::small_gpt2();
  nn::LoraConfig config{.r = 2, .target_modules = {"c_attn"}};
  nn::apply_lora(*model, config);
  io::save_lora_adapter(dir.path.string(), {config, nn::lora_state_dict(*model)});
  auto with_config = [&](const std::string& json) {
    std::ofstream(dir.file("adapter_config.json")) << json;
    return io::load_lora_adapter(dir.path.string());
  };
  EXPECT_TESSERA_ERROR(with_config(R"({"peft_type": "LORA", "r": 2, "use_dora": true})"),
                       ValueError, "use_dora");
  EXPECT_TESSERA_ERROR(
      with_config(R"({"peft_type": "LORA", "r": 2, "modules_to_save": ["lm_head"]})"), ValueError,
      "modules_to_save");
  EXPECT_TESSERA_ERROR(with_config(R"({"peft_type": "LORA", "r": 2, "rank_pattern": {"x": 4}})"),
                       ValueError, "rank_pattern");
  EXPECT_TESSERA_ERROR(with_config(R"({"peft_type": "IA3", "r": 2})"), ValueError, "LORA");
  EXPECT_TESSERA_ERROR(with_config(R"({"peft_type": 5, "r": 2})"), ValueError, "LORA");
  EXPECT_TESSERA_ERROR(with_config(R"({"peft_type": "LORA", "r": 8})"), ValueError, "rank 8");
  EXPECT_TESSERA_ERROR(with_config(R"({"peft_type": "LORA", "r": "two"})"), ValueError,
                       "expected r to be an integer");
  EXPECT_TESSERA_ERROR(with_config(R"({"peft_type": "LORA", "r": 2, "lora_alpha": "x"})"),
                       ValueError, "PEFT's types");
  EXPECT_TESSERA_ERROR(with_config("not json"), ValueError, "JSON object");
  // PEFT's usual "off" values are accepted.
  const auto ok = with_config(
      R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "bias": "none", "use_dora": false,
          "modules_to_save": null, "rank_pattern": {}, "target_modules": ["c_attn"]})");
  EXPECT_DOUBLE_EQ(ok.config.scaling(), 2.0);
  fs::remove(dir.file("adapter_model.safetensors"));
  EXPECT_TESSERA_ERROR(io::load_lora_adapter(dir.path.string()), ValueError,
                       "adapter_model.safetensors");
  EXPECT_TESSERA_ERROR(io::load_lora_adapter(dir.file("nowhere")), ValueError,
                       "adapter_config.json");
}

}  // namespace
}  // namespace tessera

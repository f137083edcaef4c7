// The model registry: every family builds from its config JSON, recognises its own models, reads
// Hugging Face configs and presets, and unknown names fail clearly.
#include <gtest/gtest.h>

#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/models/registry.h"
#include "testing/expect_error.h"

namespace tessera::models {
namespace {

// A small config of each family, as JSON.
std::string small_config(std::string_view family) {
  if (family == "gpt2") {
    GPT2Config c;
    c.vocab_size = 50, c.block_size = 16, c.n_layer = 1, c.n_head = 2, c.n_embd = 16;
    return c.to_json();
  }
  LlamaConfig c;
  c.vocab_size = 50, c.dim = 16, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1;
  c.hidden_dim = 32, c.max_seq_len = 16;
  return c.to_json();
}

TEST(ModelRegistry, EachFamilyBuildsAndRecognisesItsModels) {
  ASSERT_EQ(model_families().size(), 2u);
  for (const ModelFamily& f : model_families()) {
    EXPECT_FALSE(f.preset_names().empty()) << f.name;
    EXPECT_NE(f.preset(f.preset_names().front()).find(f.config_key), std::string::npos);
    Generator gen(1);
    const std::string json = small_config(f.name);
    std::shared_ptr<CausalLM> model = f.build(json, &gen);
    EXPECT_EQ(&family_of(*model), &f);
    EXPECT_EQ(*f.config_of(*model), json) << "the config round-trips through the model";
    for (const ModelFamily& other : model_families())
      if (&other != &f) EXPECT_FALSE(other.config_of(*model).has_value());
    EXPECT_TRUE(model->state_dict().contains(std::string(f.weight_marker))) << f.name;
    EXPECT_NE(json.find(f.config_key), std::string::npos) << f.name;
  }
}

TEST(ModelRegistry, ReadsHuggingFaceConfigs) {
  const ModelFamily* gpt2 = family_of_hf_type("gpt2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->name, "gpt2");
  const GPT2Config c = GPT2Config::from_json(gpt2->config_from_hf(
      R"({"model_type": "gpt2", "n_positions": 64, "n_layer": 2, "n_head": 2, "n_embd": 32,
          "vocab_size": 100})"));
  EXPECT_EQ(c.block_size, 64);
  EXPECT_EQ(c.n_embd, 32);
  const ModelFamily* llama = family_of_hf_type("mistral");
  ASSERT_NE(llama, nullptr);
  const LlamaConfig l = LlamaConfig::from_json(llama->config_from_hf(
      R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
          "vocab_size": 100, "max_position_embeddings": 32})"));
  EXPECT_EQ(l.n_kv_heads, 2);
  EXPECT_EQ(l.hidden_dim, 128);
  EXPECT_EQ(family_of_hf_type("bert"), nullptr);

  // Mistral v0.1's sliding window: exact as full attention up to the window, so the context is
  // capped there (it was ignored); Qwen2 lists one it does not use.
  const std::string base = R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 32)";
  auto with = [&](const std::string& extra) {
    return LlamaConfig::from_json(llama->config_from_hf(base + extra + "}"));
  };
  EXPECT_EQ(with(R"(, "sliding_window": 16)").max_seq_len, 16);
  EXPECT_EQ(with(R"(, "sliding_window": 16, "use_sliding_window": false)").max_seq_len, 32);
  EXPECT_EQ(with(R"(, "sliding_window": null)").max_seq_len, 32);
  EXPECT_EQ(with(R"(, "head_dim": 16)").explicit_head_dim, 0) << "dim / n_heads: implied";
  // A decoupled head size (Qwen3, Mistral NeMo), and Qwen3's query/key norms.
  const LlamaConfig nemo = with(R"(, "head_dim": 32)");
  EXPECT_EQ(nemo.head_dim(), 32);
  EXPECT_EQ(nemo.dim, 64);
  EXPECT_FALSE(nemo.qk_norm);
  EXPECT_TRUE(with(R"(, "model_type": "qwen3")").qk_norm);
  EXPECT_TESSERA_ERROR(with(R"(, "head_dim": 15)"), ValueError, "even head_dim");
  // A wrongly typed value is a clear error (not nlohmann's type_error).
  EXPECT_TESSERA_ERROR(LlamaConfig::from_json(llama->config_from_hf(R"({"vocab_size": "100"})")),
                       ValueError, "expected config key 'vocab_size' to be a number");
}

// rope_scaling as Hugging Face writes it: each rule with its fields, linear and YaRN lengthening
// the context as vLLM does, Transformers 5's rope_parameters, and the rules not implemented
// refused by name.
TEST(ModelRegistry, ReadsHuggingFaceRopeScaling) {
  const ModelFamily* llama = family_of_hf_type("qwen2");
  ASSERT_NE(llama, nullptr);
  auto with = [&](const std::string& extra) {
    return LlamaConfig::from_json(llama->config_from_hf(
        R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 40960)" +
        extra + "}"));
  };
  // Qwen3's long-context instructions: YaRN over the original 32768, max_position_embeddings
  // left as it was.
  const LlamaConfig qwen = with(
      R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                            "original_max_position_embeddings": 32768})");
  ASSERT_TRUE(qwen.rope_scaling);
  EXPECT_EQ(qwen.rope_scaling->rope_type, "yarn");
  EXPECT_EQ(qwen.rope_scaling->factor, 4.0);
  EXPECT_EQ(qwen.rope_scaling->original_max_position_embeddings, 32768);
  EXPECT_EQ(qwen.rope_scaling->beta_fast, 32.0);
  EXPECT_EQ(qwen.max_seq_len, 131072);
  // DeepSeek's fields, the older "type" key; without an original length it is the config's.
  const LlamaConfig deepseek = with(
      R"(, "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                            "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": false})");
  EXPECT_EQ(deepseek.rope_scaling->original_max_position_embeddings, 40960);
  EXPECT_EQ(deepseek.rope_scaling->mscale_all_dim, 0.5);
  EXPECT_FALSE(deepseek.rope_scaling->truncate);
  EXPECT_EQ(deepseek.max_seq_len, 40960 * 40);
  const LlamaConfig linear = with(R"(, "rope_scaling": {"type": "linear", "factor": 2.0})");
  EXPECT_EQ(linear.rope_scaling->rope_type, "linear");
  EXPECT_EQ(linear.max_seq_len, 81920);
  const LlamaConfig llama31 = with(
      R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  EXPECT_EQ(llama31.rope_scaling->rope_type, "llama3");
  EXPECT_EQ(llama31.max_seq_len, 40960) << "llama3's max_position_embeddings is the scaled one";
  EXPECT_FALSE(with(R"(, "rope_scaling": {"rope_type": "default"})").rope_scaling);
  const LlamaConfig v5 = with(
      R"(, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 2.0,
                               "original_max_position_embeddings": 32768})");
  EXPECT_EQ(v5.rope_theta, 1e6);
  EXPECT_EQ(v5.rope_scaling->factor, 2.0);
  EXPECT_EQ(with(R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5})").rope_theta,
            5e5);
  EXPECT_TESSERA_ERROR(with(R"(, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0})"),
                       NotImplementedError, "type dynamic");
  EXPECT_TESSERA_ERROR(with(R"(, "rope_scaling": {"rope_type": "longrope", "factor": 2.0})"),
                       NotImplementedError, "got 'longrope'");
  EXPECT_TESSERA_ERROR(with(R"(, "rope_scaling": {"rope_type": "yarn", "factor": -1})"), ValueError,
                       "factor > 0");
}

TEST(ModelRegistry, UnknownFamilyNamesTheRegisteredOnes) {
  EXPECT_TESSERA_ERROR(model_family("gpt3", "train"), ValueError,
                       "[train] expected model gpt2 or llama, got 'gpt3'");
}

}  // namespace
}  // namespace tessera::models

// infer::load_model: Tessera training checkpoints (config found in the run's config), safetensors
// with Tessera names and a Tessera config.json, and Hugging Face-named safetensors with
// Hugging Face's config.json (GPT-2's Conv1D weights transposed, its tied lm_head absent, its
// attention-mask buffers ignored); each loads to a model with the original's logits.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/infer/model_loader.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

models::GPT2Config gpt2_config() {
  models::GPT2Config c;
  c.vocab_size = 50;
  c.block_size = 24;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

models::LlamaConfig llama_config() {
  models::LlamaConfig c;
  c.vocab_size = 40;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 48;
  c.max_seq_len = 32;
  c.rope_theta = 500000.0;
  return c;
}

void expect_same_logits(models::CausalLM& want, models::CausalLM& got) {
  autograd::NoGradGuard no_grad;
  want.eval();
  Tensor idx = randint(0, want.vocab_size(), {2, 9});
  EXPECT_TRUE(allclose(got(idx), want(idx), 1e-6, 1e-6));
  EXPECT_FALSE(got.is_training());
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(LoadModel, TesseraCheckpointWithTheRunConfig) {
  testing::TempDir dir;
  manual_seed(1);
  models::Llama model(llama_config());
  io::TrainingObjects objects;
  objects.model = &model;
  // The CLI's run config: {"arch", "model": {...}, other settings}.
  const std::string config =
      R"({"arch": "llama", "model": )" + llama_config().to_json() + R"(, "train": {"lr": 0.001}})";
  io::save_checkpoint(dir.file("run"), io::capture_checkpoint(7, objects, config));
  auto loaded = infer::load_model(dir.file("run"));  // the root: its newest checkpoint
  ASSERT_NE(dynamic_cast<models::Llama*>(loaded.get()), nullptr);
  EXPECT_EQ(dynamic_cast<models::Llama&>(*loaded).config.rope_theta, 500000.0);
  expect_same_logits(model, *loaded);
  // The checkpoint folder itself, or its weights file: the config still comes from state.json.
  const std::string ckpt = dir.file("run") + "/ckpt_000007";
  for (const std::string& path : {ckpt + "/", ckpt + "/model.safetensors"}) {
    infer::LoadedModel with_config = infer::load_model_with_config(path);
    EXPECT_EQ(with_config.source, ckpt) << path;
    EXPECT_EQ(nlohmann::json::parse(with_config.config)["train"]["lr"], 0.001) << path;
    expect_same_logits(model, *with_config.model);
  }
}

TEST(LoadModel, SafetensorsWithATesseraConfig) {
  testing::TempDir dir;
  manual_seed(2);
  models::GPT2 model(gpt2_config());
  io::save_state_dict(dir.file("model.safetensors"), model.state_dict());
  write(dir.file("config.json"), gpt2_config().to_json());
  auto loaded = infer::load_model(dir.file("model.safetensors"));
  ASSERT_NE(dynamic_cast<models::GPT2*>(loaded.get()), nullptr);
  expect_same_logits(model, *loaded);
}

TEST(LoadModel, HuggingFaceGpt2NamesAndConv1DWeights) {
  testing::TempDir dir;
  manual_seed(3);
  models::GPT2 model(gpt2_config());
  // transformers' GPT2Model layout: no "transformer." prefix, Conv1D weights [in, out], the
  // causal mask saved as h.<i>.attn.bias, lm_head tied and absent.
  nn::TensorDict hf;
  for (const auto& [name, t] : model.state_dict()) {
    if (name == "lm_head.weight") continue;
    std::string key = name.substr(std::string("transformer.").size());
    const bool conv1d = key.ends_with("c_attn.weight") || key.ends_with("c_proj.weight") ||
                        key.ends_with("c_fc.weight");
    hf.insert(key, conv1d ? t.t().contiguous() : t);
  }
  hf.insert("h.0.attn.bias", ones({1, 1, 24, 24}));
  io::save_safetensors(dir.file("model.safetensors"), hf);
  write(dir.file("config.json"),
        R"({"model_type": "gpt2", "vocab_size": 50, "n_positions": 24, "n_layer": 2,
            "n_head": 2, "n_embd": 16, "layer_norm_epsilon": 1e-5})");
  auto loaded = infer::load_model(dir.path.string());  // a folder with model.safetensors
  expect_same_logits(model, *loaded);
}

TEST(LoadModel, HuggingFaceLlamaConfig) {
  testing::TempDir dir;
  manual_seed(4);
  models::Llama model(llama_config());
  io::save_safetensors(dir.file("model.safetensors"), model.state_dict());
  write(dir.file("config.json"),
        R"({"model_type": "llama", "vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": false, "torch_dtype": "float32"})");
  auto loaded = infer::load_model(dir.file("model.safetensors"));
  expect_same_logits(model, *loaded);
}

TEST(LoadModel, RejectsWhatItCannotRead) {
  testing::TempDir dir;
  EXPECT_TESSERA_ERROR(infer::load_model(dir.file("nope.bin")), ValueError, "[load_model]");
  write(dir.file("x.safetensors"), "");
  EXPECT_TESSERA_ERROR(infer::load_model(dir.file("x.safetensors")), ValueError,
                       "expected a config.json");
  EXPECT_TESSERA_ERROR(infer::make_model_from_config(R"({"lr": 1})"), ValueError,
                       "expected a model config");
  EXPECT_TESSERA_ERROR(infer::make_model_from_config(R"({"model_type": "bert"})"), ValueError,
                       "expected model_type one of gpt2, llama, mistral, got 'bert'");
}

}  // namespace
}  // namespace tessera

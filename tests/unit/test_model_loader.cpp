// infer::load_model: Tessera training checkpoints (config found in the run's config), safetensors
// with Tessera names and a Tessera config.json, and Hugging Face-named safetensors with
// Hugging Face's config.json (GPT-2's Conv1D weights transposed, its tied lm_head absent, its
// attention-mask buffers ignored); each loads to a model with the original's logits. Without
// weights, the same architecture from configs and headers alone.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/infer/model_loader.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/importers.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"
#include "testing/shared_data.h"
#include "testing/small_models.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

const infer::LoadOptions kHeaderOnly{.weights = false, .config_overrides = ""};

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

// A Hugging Face Mixtral folder: model_type mixtral, the experts' keys in its config, and
// block_sparse_moe.* weights, loaded as the llama family with experts.
TEST(LoadModel, HuggingFaceMixtralConfig) {
  testing::TempDir dir;
  models::LlamaConfig c = llama_config();
  c.n_experts = 4;
  c.n_experts_per_token = 2;
  manual_seed(5);
  models::Llama model(c);
  io::save_safetensors(dir.file("model.safetensors"), model.state_dict());
  write(dir.file("config.json"),
        R"({"model_type": "mixtral", "vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
            "output_router_logits": false, "sliding_window": null, "torch_dtype": "float32"})");
  auto loaded = infer::load_model(dir.file("model.safetensors"));
  expect_same_logits(model, *loaded);
  const auto& llama = dynamic_cast<const models::Llama&>(*loaded);
  EXPECT_EQ(llama.config.n_experts, 4);
  EXPECT_DOUBLE_EQ(llama.config.router_aux_loss_coef, 0.02);
}

// A Qwen2 folder: model_type qwen2 is LLaMA with biases on q, k and v.
TEST(LoadModel, HuggingFaceQwen2Config) {
  testing::TempDir dir;
  models::LlamaConfig c = llama_config();
  c.qkv_bias = true;
  manual_seed(6);
  models::Llama model(c);
  testing::draw_biases(model, 1.0);
  io::save_safetensors(dir.file("model.safetensors"), model.state_dict());
  write(dir.file("config.json"),
        R"({"model_type": "qwen2", "vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "use_sliding_window": false, "sliding_window": 32768, "tie_word_embeddings": false})");
  auto loaded = infer::load_model(dir.file("model.safetensors"));
  expect_same_logits(model, *loaded);
  EXPECT_TRUE(dynamic_cast<const models::Llama&>(*loaded).config.qkv_bias);
}

// A Qwen3 folder (Qwen3-0.6B's keys): heads of head_dim 16 over a width of 32, query and key
// norms under Hugging Face's names, tied embeddings.
TEST(LoadModel, HuggingFaceQwen3Config) {
  testing::TempDir dir;
  models::LlamaConfig c = llama_config();
  c.explicit_head_dim = 16;
  c.qk_norm = true;
  c.tie_embeddings = true;
  manual_seed(7);
  models::Llama model(c);
  {
    autograd::NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters())
      if (name.ends_with("_norm.weight")) p.copy_(1.0 + randn(p.sizes()) * 0.3);
  }
  io::save_safetensors(dir.file("model.safetensors"), model.state_dict());
  write(dir.file("config.json"),
        R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 40,
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "rope_scaling": null, "attention_bias": false, "use_sliding_window": false,
            "sliding_window": null, "max_window_layers": 28, "tie_word_embeddings": true})");
  auto loaded = infer::load_model(dir.file("model.safetensors"));
  expect_same_logits(model, *loaded);
  const models::LlamaConfig& got = dynamic_cast<const models::Llama&>(*loaded).config;
  EXPECT_TRUE(got.qk_norm);
  EXPECT_EQ(got.head_dim(), 16);
  EXPECT_TRUE(loaded->state_dict().contains("model.layers.1.self_attn.k_norm.weight"));
}

// A Phi-3 / Phi-4 folder: LLaMA whose attention stores q, k and v as one qkv_proj ([q; k; v]
// rows) and whose MLP stores gate and up as one gate_up_proj ([gate; up]: Phi3MLP chunks its
// output into gate, then up); they split as they load. Partial rotary embeddings (Phi-4-mini)
// and LongRoPE (the 128k Phi-3s) are refused by name.
TEST(LoadModel, HuggingFacePhi3ConfigSplitsFusedProjections) {
  testing::TempDir dir;
  const models::LlamaConfig c = llama_config();  // 4 query heads, 2 KV heads: unequal parts
  manual_seed(10);
  models::Llama model(c);
  nn::TensorDict fused;
  for (const auto& [name, t] : model.state_dict()) {
    const size_t at = name.find("self_attn.q_proj.weight");
    const size_t mlp = name.find("mlp.gate_proj.weight");
    if (at != std::string::npos) {
      const std::string layer = name.substr(0, at) + "self_attn.";
      fused.insert(layer + "qkv_proj.weight",
                   cat({t, model.state_dict().at(layer + "k_proj.weight"),
                        model.state_dict().at(layer + "v_proj.weight")},
                       0));
    } else if (mlp != std::string::npos) {
      const std::string layer = name.substr(0, mlp) + "mlp.";
      fused.insert(layer + "gate_up_proj.weight",
                   cat({t, model.state_dict().at(layer + "up_proj.weight")}, 0));
    } else if (name.find("k_proj") == std::string::npos &&
               name.find("v_proj") == std::string::npos &&
               name.find("up_proj") == std::string::npos) {
      fused.insert(name, t);
    }
  }
  io::save_safetensors(dir.file("model.safetensors"), fused);
  const std::string config =
      R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 40,
          "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 48, "max_position_embeddings": 32,
          "original_max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
          "rope_scaling": null, "sliding_window": 31, "hidden_act": "silu",
          "tie_word_embeddings": false)";
  write(dir.file("config.json"), config + "}");
  auto loaded = infer::load_model(dir.file("model.safetensors"));
  expect_same_logits(model, *loaded);
  EXPECT_EQ(loaded->max_seq_len(), 31) << "the sliding window caps the context";

  write(dir.file("config.json"), config + R"(, "partial_rotary_factor": 0.75})");
  EXPECT_TESSERA_ERROR(infer::load_model(dir.file("model.safetensors")), NotImplementedError,
                       "partial_rotary_factor 1");
  write(dir.file("config.json"),
        config +
            R"(, "rope_scaling": {"type": "longrope", "short_factor": [1], "long_factor": [2]}})");
  EXPECT_TESSERA_ERROR(infer::load_model(dir.file("model.safetensors")), NotImplementedError,
                       "got 'longrope'");
  // A fused weight whose rows do not add up to its parts' is refused by name.
  fused.insert_or_assign("model.layers.0.mlp.gate_up_proj.weight", randn({100, 32}));
  io::save_safetensors(dir.file("model.safetensors"), fused);
  write(dir.file("config.json"), config + "}");
  EXPECT_TESSERA_ERROR(infer::load_model(dir.file("model.safetensors")), ValueError,
                       "expected 'model.layers.0.mlp.gate_up_proj.weight' to have 96 rows");
}

// Overrides merge into the config before the model is built (vLLM's --hf-overrides): a Hugging
// Face folder given YaRN's long context, a training run's LlamaConfig a shorter context; files
// without a config and overrides that are not an object are refused.
TEST(LoadModel, ConfigOverridesMergeIntoTheModelsConfig) {
  testing::TempDir dir;
  models::LlamaConfig c = llama_config();
  manual_seed(9);
  models::Llama plain(c);
  io::save_safetensors(dir.file("model.safetensors"), plain.state_dict());
  write(dir.file("config.json"),
        R"({"model_type": "llama", "vocab_size": 40, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "rope_scaling": null, "tie_word_embeddings": false})");
  infer::LoadOptions options;
  options.config_overrides =
      R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": 32}})";
  const infer::LoadedModel loaded =
      infer::load_model_with_config(dir.file("model.safetensors"), options);
  const models::LlamaConfig& got = dynamic_cast<const models::Llama&>(*loaded.model).config;
  ASSERT_TRUE(got.rope_scaling);
  EXPECT_EQ(got.rope_scaling->rope_type, "yarn");
  EXPECT_EQ(got.max_seq_len, 128);
  EXPECT_TRUE(nlohmann::json::parse(loaded.config)["rope_scaling"].is_object());
  models::LlamaConfig want_config = c;
  want_config.rope_scaling = got.rope_scaling;
  want_config.max_seq_len = 128;
  models::Llama want(want_config);
  want.load_state_dict(loaded.model->state_dict());
  expect_same_logits(want, *loaded.model);

  // A training run's config: the overrides reach its "model" entry.
  io::TrainingObjects objects;
  objects.model = &plain;
  io::save_checkpoint(dir.file("run"),
                      io::capture_checkpoint(1, objects, R"({"model": )" + c.to_json() + "}"));
  options.config_overrides = R"({"max_seq_len": 16})";
  EXPECT_EQ(infer::load_model_with_config(dir.file("run"), options).model->max_seq_len(), 16);

  options.config_overrides = R"(["max_seq_len"])";
  EXPECT_TESSERA_ERROR(infer::load_model_with_config(dir.file("run"), options), ValueError,
                       "expected config overrides as a JSON object");
  options.config_overrides = R"({"max_seq_len": 16})";
  models::GPT2 gpt2(gpt2_config());
  io::save_llmc_gpt2(dir.file("gpt2.bin"), gpt2);
  EXPECT_TESSERA_ERROR(infer::load_model_with_config(dir.file("gpt2.bin"), options), ValueError,
                       "expected a model with a config to apply overrides to");
}

// A Qwen3-MoE folder (Qwen3-30B-A3B's keys, scaled down): every layer's MLP a mixture under
// Hugging Face's names, moe_intermediate_size units per expert; dense layers among sparse ones
// are refused by name.
TEST(LoadModel, HuggingFaceQwen3MoeConfig) {
  testing::TempDir dir;
  const models::LlamaConfig c = testing::qwen3_moe_config(llama_config(), 16, 24);
  manual_seed(8);
  models::Llama model(c);
  io::save_safetensors(dir.file("model.safetensors"), model.state_dict());
  const std::string config =
      R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 40,
          "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
          "moe_intermediate_size": 24, "num_experts": 4, "num_experts_per_tok": 2,
          "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
          "router_aux_loss_coef": 0.001, "output_router_logits": false,
          "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
          "tie_word_embeddings": false})";
  write(dir.file("config.json"), config);
  auto loaded = infer::load_model(dir.file("model.safetensors"));
  expect_same_logits(model, *loaded);
  const models::LlamaConfig& got = dynamic_cast<const models::Llama&>(*loaded).config;
  EXPECT_TRUE(got.qwen_moe && got.norm_topk_prob && got.qk_norm);
  EXPECT_EQ(got.n_experts, 4);
  EXPECT_EQ(got.hidden_dim, 24);
  std::string dense = config;
  dense.replace(dense.find(R"("mlp_only_layers": [])"), 21, R"("mlp_only_layers": [1])");
  write(dir.file("config.json"), dense);
  EXPECT_TESSERA_ERROR(infer::load_model(dir.file("model.safetensors")), NotImplementedError,
                       "dense layers among sparse ones");
}

// Names and shapes of a model's parameters.
std::vector<std::pair<std::string, Shape>> shapes_of(const models::CausalLM& model) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [name, p] : model.named_parameters()) out.emplace_back(name, p.sizes());
  return out;
}

// Bytes of a model's parameter pages resident in memory (mincore): the process's resident size
// also moves with what the kernel does meanwhile (khugepaged collapsing other huge-page-advised
// memory), which made a check of its growth flaky.
int64_t resident_parameter_bytes(const models::CausalLM& model) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  int64_t resident = 0;
  for (const Tensor& p : model.parameters()) {
    const auto data = reinterpret_cast<uintptr_t>(p.data_ptr());
    const uintptr_t begin = data / page * page;
    const uintptr_t end = data + static_cast<uintptr_t>(p.numel()) * p.element_size();
    std::vector<unsigned char> in((end - begin + page - 1) / page);
    if (mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) != 0) {
      ADD_FAILURE() << "mincore failed";
      return -1;
    }
    for (const unsigned char c : in) resident += (c & 1) * static_cast<int64_t>(page);
  }
  return resident;
}

// Without weights a loader builds the architecture from configs and headers alone: the same
// parameters as a full load, for every format, and no memory committed for them (an llm.c file
// of 17M parameters, 68 MB, adds a few MB of resident memory where a full load adds it all).
TEST(LoadModel, ArchitectureWithoutWeightsHasTheFullLoadsParameters) {
  testing::TempDir dir;
  manual_seed(5);
  models::GPT2 gpt2(gpt2_config());
  io::save_state_dict(dir.file("model.safetensors"), gpt2.state_dict());
  write(dir.file("config.json"), gpt2_config().to_json());
  io::save_llmc_gpt2(dir.file("gpt2.bin"), gpt2);
  io::TrainingObjects objects;
  objects.model = &gpt2;
  io::save_checkpoint(
      dir.file("run"),
      io::capture_checkpoint(3, objects, R"({"model": )" + gpt2_config().to_json() + "}"));
  for (const std::string& path :
       {dir.file("model.safetensors"), dir.file("gpt2.bin"), dir.file("run")}) {
    const auto full = infer::load_model_with_config(path);
    const auto bare = infer::load_model_with_config(path, kHeaderOnly);
    EXPECT_EQ(shapes_of(*bare.model), shapes_of(*full.model)) << path;
    EXPECT_EQ(bare.config, full.config) << path;
  }
  models::GPT2Config big = gpt2_config();
  big.vocab_size = 8192;
  big.block_size = 256;
  big.n_layer = 4;
  big.n_embd = 512;
  big.n_head = 8;
  const std::string big_path = dir.file("big.bin");
  int64_t weight_bytes = 0;
  {
    nn::init::NoInitGuard no_init;  // its values do not matter
    models::GPT2 model(big);
    for (const Tensor& p : model.parameters()) weight_bytes += p.numel() * 4;
    io::save_llmc_gpt2(big_path, model);
  }
  // Freed blocks and malloc's free memory go back: a new model gets fresh pages.
  cpu_allocator()->empty_cache();
  malloc_trim(0);
  const auto bare = infer::load_model_with_config(big_path, kHeaderOnly);
  EXPECT_LT(resident_parameter_bytes(*bare.model), weight_bytes / 4)
      << "of " << weight_bytes << " bytes of weights";
  const auto full = infer::load_model_with_config(big_path);
  EXPECT_GT(resident_parameter_bytes(*full.model), weight_bytes / 2) << "a full load touches them";

  TESSERA_SHARED_DATA_OR_SKIP(stories, "stories260K.bin");
  EXPECT_EQ(shapes_of(*infer::load_model_with_config(stories, kHeaderOnly).model),
            shapes_of(*infer::load_model_with_config(stories).model));
  // A truncated file is refused without its weights too: its size no longer fits its header.
  const std::string cut = dir.file("cut.bin");
  {
    std::ifstream in(stories, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  }
  EXPECT_TESSERA_ERROR(infer::load_model_with_config(cut, kHeaderOnly), ValueError,
                       "for the sizes in its header");
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
                       "expected model_type one of gpt2, llama, mistral, mixtral, qwen2, qwen3, "
                       "qwen3_moe, phi3, got 'bert'");
}

}  // namespace
}  // namespace tessera

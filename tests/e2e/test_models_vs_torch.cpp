// GPT-2 and LLaMA against PyTorch references written for the tests
// (tests/reference/model_reference.py): from the same initial weights (handed over as
// safetensors), the logits, loss and every parameter gradient agree in float32 (rtol 1e-4), and
// so does the loss of each of 20 AdamW steps (the library Trainer, with warmup + cosine and
// gradient clipping). The
// stories260K llama2.c model, imported, gives llama2.c's logits. Skipped with a message when
// /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tessera/io/importers.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"
#include "tessera/train/trainer.h"
#include "testing/shared_data.h"
#include "testing/small_models.h"
#include "testing/temp_dir.h"
#include "testing/torch_reference.h"

namespace tessera {
namespace {

constexpr int64_t kSteps = 20, kBatch = 2, kSeq = 16, kVocab = 96;
constexpr double kRtol = 1e-4;

// The AdamW run both sides do (mirrored in model_reference.py's train.json reader).
struct TrainSettings {
  double lr = 3e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  int64_t warmup = 5, max_steps = kSteps;
  double min_lr = 3e-4, clip = 1.0;
  std::string json() const {
    return detail::str(R"({"lr": )", lr, R"(, "beta1": )", beta1, R"(, "beta2": )", beta2,
                       R"(, "eps": )", eps, R"(, "weight_decay": )", weight_decay,
                       R"(, "warmup": )", warmup, R"(, "max_steps": )", max_steps,
                       R"(, "min_lr": )", min_lr, R"(, "clip": )", clip, "}");
  }
};

// Runs model_reference.py with args; returns ref.safetensors from dir, or fails the test.
nn::TensorDict run_reference(const std::string& args, const testing::TempDir& dir) {
  return testing::run_reference_script("model_reference.py", args, dir);
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  testing::expect_close(got, want, what, kRtol);
}

class ModelsVsTorch : public testing::TorchReferenceTest {};

models::GPT2Config gpt2_config() {
  models::GPT2Config c;
  c.vocab_size = kVocab;
  c.block_size = kSeq;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  return c;
}

models::LlamaConfig llama_config() {
  models::LlamaConfig c;
  c.vocab_size = kVocab;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 160;
  c.max_seq_len = kSeq;
  return c;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Writes the model's weights and the batches, runs the reference, and compares everything.
void check_against_torch(models::CausalLM& model, const std::string& kind,
                         const std::string& config_json) {
  testing::TempDir dir;
  const TrainSettings train;
  io::save_state_dict(dir.file("init.safetensors"), model.state_dict());
  // Random tokens whose targets are a fixed function of the token, so training can learn them.
  Tensor x = randint(0, kVocab, {kSteps, kBatch, kSeq});
  Tensor y = empty_like(x);
  for (int64_t i = 0; i < x.numel(); ++i)
    y.data_ptr<int64_t>()[i] = (7 * x.data_ptr<int64_t>()[i] + 3) % kVocab;
  io::save_safetensors(dir.file("batches.safetensors"), nn::TensorDict{{"x", x}, {"y", y}});
  write_text(dir.file("config.json"), config_json);
  write_text(dir.file("train.json"), train.json());
  nn::TensorDict ref = run_reference(kind + " " + dir.path.string(), dir);
  if (ref.empty()) return;

  Tensor logits = model(x.select(0, 0));
  Tensor loss = model.loss_from_logits(logits, y.select(0, 0));
  if (const Tensor aux = model.auxiliary_loss(); aux.defined()) loss = loss + aux;
  loss.backward();
  expect_close(logits, ref.at("logits"), "logits");
  expect_close(loss, ref.at("loss"), "loss");
  size_t trained = 0;  // frozen parameters (under LoRA) have no gradient on either side
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    ASSERT_TRUE(ref.contains("grad." + name)) << name;
    expect_close(p.grad(), ref.at("grad." + name), "grad of " + name);
    ++trained;
  }
  EXPECT_EQ(trained + 3, ref.size()) << "every reference grad checked";

  // The 20 steps run through the library Trainer (what tessera train runs).
  model.zero_grad();
  optim::AdamOptions o;
  o.lr = train.lr;
  o.beta1 = train.beta1;
  o.beta2 = train.beta2;
  o.eps = train.eps;
  optim::AdamW opt(optim::weight_decay_param_groups(model.parameters(), train.weight_decay), o);
  optim::WarmupCosineLR sched(opt, train.warmup, train.max_steps, train.min_lr);
  train::Trainer trainer(model, train::causal_lm_loss(model), opt, &sched, nullptr,
                         {.grad_accum = 1, .grad_clip = train.clip});
  std::vector<double> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    const train::StepResult r =
        trainer.step([&] { return data::Batch{x.select(0, s), y.select(0, s)}; });
    losses.push_back(r.loss);
  }
  EXPECT_EQ(trainer.step_count(), kSteps);
  expect_close(tensor(losses), ref.at("losses"), "losses of the AdamW steps");
  EXPECT_LT(losses.back(), losses.front()) << "training reduces the loss";
}

// Mixtral (the LLaMA with a mixture of 4 experts, 2 per token) and its load-balancing loss,
// Hugging Face's MixtralSparseMoeBlock and load_balancing_loss_func in the reference. The router
// is drawn 10x wider than the init so no token sits near a tie that rounding could flip.
TEST_F(ModelsVsTorch, MixtralLogitsLossWithLoadBalancingGradsAndTraining) {
  models::LlamaConfig c = llama_config();
  c.hidden_dim = 48;
  c.n_experts = 4;
  c.n_experts_per_token = 2;
  c.router_aux_loss_coef = 0.02;
  manual_seed(24);
  models::Llama model(c);
  {
    autograd::NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters())
      if (name.ends_with("gate.weight")) p.mul_(10.0);
  }
  check_against_torch(model, "llama", c.to_json());
}

// Qwen2's biases on q, k and v, and Hugging Face Llama's attention_bias (o too), drawn nonzero.
TEST_F(ModelsVsTorch, AttentionBiasesLogitsLossGradsAndTraining) {
  for (const bool all : {false, true}) {
    models::LlamaConfig c = llama_config();
    (all ? c.attention_bias : c.qkv_bias) = true;
    manual_seed(all ? 26 : 25);
    models::Llama model(c);
    testing::draw_biases(model, 0.1);
    EXPECT_EQ(model.named_parameters().contains("model.layers.0.self_attn.o_proj.bias"), all);
    check_against_torch(model, "llama", c.to_json());
  }
}

// Qwen3: heads of 24 over a width of 64 (4 x 24 = 96 wide q), each query and key head RMS-normed
// (weights drawn away from 1) before the rotation; and a decoupled head size alone (NeMo's).
TEST_F(ModelsVsTorch, Qwen3HeadNormsAndDecoupledHeadsLogitsLossGradsAndTraining) {
  for (const bool qk_norm : {true, false}) {
    models::LlamaConfig c = llama_config();
    c.explicit_head_dim = 24;
    c.qk_norm = qk_norm;
    manual_seed(qk_norm ? 27 : 28);
    models::Llama model(c);
    {
      autograd::NoGradGuard no_grad;
      for (auto& [name, p] : model.named_parameters())
        if (name.ends_with("_norm.weight") && name.find("self_attn") != std::string::npos)
          p.copy_(1.0 + randn(p.sizes()) * 0.3);
    }
    EXPECT_EQ(model.named_parameters().at("model.layers.0.self_attn.q_proj.weight").size(0),
              c.n_heads * 24);
    EXPECT_EQ(model.named_parameters().contains("model.layers.0.self_attn.k_norm.weight"), qk_norm);
    check_against_torch(model, "llama", c.to_json());
  }
}

// Qwen3-MoE: Qwen3's heads, every MLP a mixture of 4 experts named as Hugging Face's
// Qwen3MoeSparseMoeBlock (mlp.gate, mlp.experts.<j>.{gate,up,down}_proj), the chosen experts'
// probabilities not renormalised (norm_topk_prob false), with the load-balancing loss.
TEST_F(ModelsVsTorch, Qwen3MoeLogitsLossWithLoadBalancingGradsAndTraining) {
  models::LlamaConfig c = testing::qwen3_moe_config(llama_config(), 24, 40);
  c.router_aux_loss_coef = 0.02;
  c.norm_topk_prob = false;
  manual_seed(29);
  models::Llama model(c);
  {
    autograd::NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters())
      if (name.ends_with("mlp.gate.weight")) p.mul_(10.0);
  }
  EXPECT_TRUE(model.named_parameters().contains("model.layers.1.mlp.experts.3.down_proj.weight"));
  check_against_torch(model, "llama", c.to_json());
}

TEST_F(ModelsVsTorch, Gpt2LogitsLossGradsAndTraining) {
  const models::GPT2Config c = gpt2_config();
  manual_seed(20);
  models::GPT2 model(c);
  check_against_torch(model, "gpt2", c.to_json());
}

TEST_F(ModelsVsTorch, LlamaGqaLlama3RopeLogitsLossGradsAndTraining) {
  models::LlamaConfig c = llama_config();
  c.rope_theta = 10000.0;
  // Head dim 16: wavelengths 6.3 (kept), 19.9 (smoothed), 63 and longer (divided by 8).
  c.rope_scaling = models::RopeScaling{8.0, 1.0, 4.0, 32};
  manual_seed(21);
  models::Llama model(c);
  check_against_torch(model, "llama", c.to_json());
}

TEST_F(ModelsVsTorch, LlamaYarnRopeLogitsLossGradsAndTraining) {
  models::LlamaConfig c = llama_config();
  c.rope_theta = 10000.0;
  // Head dim 16 over an original context of 2048: dimensions 0-2 kept, 3-5 on the ramp, 6-7
  // divided by 4; cos and sin times 0.1 ln 4 + 1.
  c.rope_scaling = testing::yarn_scaling(4.0, 2048);
  manual_seed(24);
  models::Llama model(c);
  check_against_torch(model, "llama", c.to_json());
}

// LoRA on some of each model's layers (PEFT's layer written out in the reference): only the
// lora_A / lora_B weights get gradients and train, the logits include their branches.
void check_lora_against_torch(models::CausalLM& model, const std::string& kind,
                              std::string config_json, const nn::LoraConfig& lora) {
  nn::apply_lora(model, lora);
  {
    autograd::NoGradGuard no_grad;  // lora_B starts at zero: give the branches an effect
    for (auto& [name, t] : nn::lora_state_dict(model))
      if (name.ends_with("lora_B.weight")) t.copy_(randn(t.sizes()) * 0.05);
  }
  std::string targets;
  for (const std::string& t : lora.target_modules)
    targets += (targets.empty() ? "\"" : ", \"") + t + "\"";
  config_json.insert(config_json.rfind('}'),
                     detail::str(R"(, "lora": {"r": )", lora.r, R"(, "lora_alpha": )",
                                 lora.lora_alpha, R"(, "target_modules": [)", targets, "]}"));
  check_against_torch(model, kind, config_json);
}

TEST_F(ModelsVsTorch, Gpt2LoraLogitsGradsAndTraining) {
  const models::GPT2Config c = gpt2_config();
  manual_seed(22);
  auto model = std::make_shared<models::GPT2>(c);
  check_lora_against_torch(*model, "gpt2", c.to_json(),
                           {.r = 4, .lora_alpha = 8, .target_modules = {"c_attn", "c_fc"}});
}

TEST_F(ModelsVsTorch, LlamaLoraLogitsGradsAndTraining) {
  const models::LlamaConfig c = llama_config();
  manual_seed(23);
  auto model = std::make_shared<models::Llama>(c);
  check_lora_against_torch(
      *model, "llama", c.to_json(),
      {.r = 8, .lora_alpha = 16, .target_modules = {"q_proj", "v_proj", "down_proj"}});
}

TEST_F(ModelsVsTorch, Stories260KImportMatchesLlama2cForward) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "stories260K.bin");
  std::shared_ptr<models::Llama> model = io::load_llama2c(path);
  EXPECT_EQ(model->config.dim, 64);
  EXPECT_EQ(model->config.n_layers, 5);
  EXPECT_EQ(model->config.n_kv_heads, 4);
  testing::TempDir dir;
  Tensor idx = tensor(
      std::vector<int64_t>{1, 403, 407, 429, 381, 408, 410, 384, 260, 272, 383, 391}, Shape{1, 12});
  io::save_safetensors(dir.file("tokens.safetensors"), nn::TensorDict{{"idx", idx}});
  nn::TensorDict ref = run_reference("llama2c " + path + " " + dir.path.string(), dir);
  if (ref.empty()) return;
  model->eval();
  expect_close((*model)(idx), ref.at("logits"), "stories260K logits");
}

}  // namespace
}  // namespace tessera

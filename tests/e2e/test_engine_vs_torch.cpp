// The inference engine against PyTorch references of the same models
// (tests/reference/engine_reference.py): greedy generation token for token and every step's
// logits (rtol 1e-4), for llama2.c's stories260K from BOS (200 tokens, through the llama2.c
// forward written independently of tessera's importer), a random LLaMA with grouped-query
// attention and Llama-3 RoPE scaling, and a random GPT-2. Each runs through infer::generate
// (static cache) and through the Engine (paged cache, batched with other requests of other
// lengths): both give the reference's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"
#include "tessera/infer/model_loader.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"
#include "tessera/nn/init.h"
#include "tessera/tessera.h"
#include "testing/shared_data.h"
#include "testing/temp_dir.h"
#include "testing/torch_reference.h"

namespace tessera {
namespace {

using infer::GenerationParams;

class EngineVsTorch : public testing::TorchReferenceTest {};

std::vector<int32_t> as_ids(const Tensor& t) {
  Tensor c = t.to(kInt64).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

GenerationParams greedy(int64_t n) {
  GenerationParams p;
  p.sampling.temperature = 0.0;
  p.stopping.max_tokens = n;
  return p;
}

// Runs the request alone through generate(), then among others through the Engine.
void check_against_reference(models::CausalLM& model, const std::vector<int32_t>& prompt,
                             const nn::TensorDict& ref, const std::string& what) {
  const std::vector<int32_t> want = as_ids(ref.at("tokens"));
  const int64_t n = static_cast<int64_t>(want.size());
  infer::ModelRunner runner(model);
  std::vector<float> logits;
  infer::GenerateOptions opts;
  opts.on_logits = [&](std::span<const float> l) {
    logits.insert(logits.end(), l.begin(), l.end());
  };
  const infer::GenerationResult r = infer::generate(runner, prompt, greedy(n), opts);
  EXPECT_EQ(r.tokens, want) << what << ": generate() differs from the reference";
  EXPECT_EQ(r.finish_reason, infer::FinishReason::Length);
  testing::expect_close(tensor(logits).reshape({n, -1}), ref.at("logits"), what + " logits");

  // The Engine, with small blocks and five other requests (different prompts and lengths) that
  // start and finish around it.
  infer::EngineConfig config;
  config.num_blocks = 64;
  config.max_num_seqs = 4;
  config.max_num_batched_tokens = 96;  // long prompts are prefilled in chunks
  infer::Engine engine(model, config);
  manual_seed(99);
  for (int i = 0; i < 3; ++i) {
    Tensor other = randint(0, model.vocab_size(), {5 + 30 * i});
    engine.add_request(as_ids(other), greedy(10 + 25 * i));
  }
  const int64_t id = engine.add_request(prompt, greedy(n));
  for (int i = 0; i < 2; ++i)
    engine.add_request(as_ids(randint(0, model.vocab_size(), {9})), greedy(40));
  std::vector<int32_t> got;
  while (engine.has_unfinished())
    for (const infer::RequestOutput& out : engine.step())
      if (out.request_id == id) got.insert(got.end(), out.new_tokens.begin(), out.new_tokens.end());
  EXPECT_EQ(got, want) << what << ": the Engine differs from the reference";
}

TEST_F(EngineVsTorch, Stories260KGreedyFromBosMatchesLlama2cForward) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "stories260K.bin");
  testing::TempDir dir;
  const nn::TensorDict ref = testing::run_reference_script(
      "engine_reference.py", "llama2c " + path + " " + dir.path.string() + " 200", dir);
  if (ref.empty()) return;
  auto model = infer::load_model(path);
  check_against_reference(*model, {1}, ref, "stories260K");
}

// Weights ~ N(0, std) so the next-token distributions are peaked (the default 0.02 gives nearly
// uniform logits, whose argmax float32 rounding could flip).
void sharpen(models::CausalLM& model, double std) {
  Generator gen(7);
  for (auto& [name, p] : model.named_parameters())
    if (p.dim() == 2) {
      Tensor t = p.detach();
      nn::init::normal_(t, 0.0, std, &gen);
    }
}

void run_model_case(models::CausalLM& model, const std::string& kind, const std::string& config) {
  testing::TempDir dir;
  io::save_state_dict(dir.file("init.safetensors"), model.state_dict());
  std::ofstream(dir.file("config.json")) << config;
  manual_seed(5);
  Tensor prompt = randint(0, model.vocab_size(), {1, 7});
  io::save_safetensors(dir.file("prompt.safetensors"), nn::TensorDict{{"idx", prompt}});
  const nn::TensorDict ref = testing::run_reference_script(
      "engine_reference.py", kind + " " + dir.path.string() + " 60", dir);
  if (ref.empty()) return;
  check_against_reference(model, as_ids(prompt), ref, kind);
}

TEST_F(EngineVsTorch, RandomLlamaWithGqaMatchesTorch) {
  models::LlamaConfig c;
  c.vocab_size = 96;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 160;
  c.max_seq_len = 128;
  c.rope_scaling = models::RopeScaling{8.0, 1.0, 4.0, 32};
  models::Llama model(c);
  sharpen(model, 0.15);
  run_model_case(model, "llama", c.to_json());
}

TEST_F(EngineVsTorch, RandomGpt2MatchesTorch) {
  models::GPT2Config c;
  c.vocab_size = 96;
  c.block_size = 128;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  models::GPT2 model(c);
  sharpen(model, 0.15);
  run_model_case(model, "gpt2", c.to_json());
}

}  // namespace
}  // namespace tessera

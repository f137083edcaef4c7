#pragma once
// LoRA adapters for the engine and server tests: random weights for a model's targeted Linear
// layers (a fresh adapter's lora_B is zero and changes nothing), and what a request gets
// through one of them alone.
#include <memory>
#include <vector>

#include "tessera/infer/engine.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/lora.h"
#include "tessera/ops/creation.h"

namespace tessera::testing {

// lora_A [r, in] and lora_B [out, r] ~ N(0, scale^2) (Generator(seed)) for each Linear of model
// that config targets, rank r and alpha 2r.
inline nn::LoraAdapter random_lora_adapter(nn::Module& model, std::vector<std::string> targets,
                                           int64_t r, uint64_t seed, double scale) {
  nn::LoraAdapter out{{.r = r, .lora_alpha = 2.0 * r, .target_modules = std::move(targets)}, {}};
  Generator gen(seed);
  for (const auto& [name, module] : model.named_modules()) {
    const auto linear = std::dynamic_pointer_cast<nn::Linear>(module);
    if (!linear || !out.config.targets(name)) continue;
    out.weights.insert(name + ".lora_A.weight",
                       randn({r, linear->in_features}, kFloat32, &gen) * scale);
    out.weights.insert(name + ".lora_B.weight",
                       randn({linear->out_features, r}, kFloat32, &gen) * scale);
  }
  return out;
}

// The greedy tokens (at most max_tokens) of prompt through adapter lora_id (0: the base model)
// in an engine of its own that registered loras in order.
inline std::vector<int32_t> greedy_alone(
    const models::CausalLM& model, const std::vector<nn::LoraAdapter>& loras,
    const std::vector<int32_t>& prompt, int32_t lora_id, int64_t max_tokens,
    std::shared_ptr<const tokenizers::Tokenizer> tokenizer = nullptr) {
  infer::Engine engine(model, {.num_blocks = 64}, std::move(tokenizer));
  for (const nn::LoraAdapter& a : loras) engine.add_lora(a);
  infer::GenerationParams p;
  p.sampling.temperature = 0;
  p.stopping.max_tokens = max_tokens;
  p.lora_id = lora_id;
  engine.add_request(prompt, p);
  std::vector<int32_t> out;
  while (engine.has_unfinished())
    for (const infer::RequestOutput& o : engine.step())
      out.insert(out.end(), o.new_tokens.begin(), o.new_tokens.end());
  return out;
}

}  // namespace tessera::testing

#pragma once
// LoRA fine-tuning (Hu et al. 2021) as PEFT does it: chosen Linear layers get a low-rank branch
// (nn::Linear::add_lora), every other parameter is frozen, and the trained branches are saved as
// a PEFT adapter (io/lora_adapter.h) that PEFT, vLLM or Tessera's engine apply to the base model.
//
//   nn::LoraConfig lora{.r = 8, .lora_alpha = 16, .target_modules = {"c_attn"}};
//   nn::apply_lora(*model, lora);                 // only the lora_A / lora_B weights train
//   io::save_lora_adapter("out/adapter", {lora, nn::lora_state_dict(*model)});
//   nn::merge_lora(*base, io::load_lora_adapter("out/adapter"));  // W += scaling * B A
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// PEFT's LoraConfig fields that shape the weights.
struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  // Module names: a layer is adapted when its name is one of them or ends with "." + one of
  // them ("c_attn" adapts every transformer.h.<i>.attn.c_attn); "all-linear" adapts every
  // Linear but the output head (lm_head). target_regex, when set, replaces the list: a layer is
  // adapted when its whole name matches it (PEFT's string target_modules).
  std::vector<std::string> target_modules;
  std::string target_regex;
  bool use_rslora = false;  // scaling alpha / sqrt(r) instead of alpha / r

  double scaling() const {
    return lora_alpha / (use_rslora ? std::sqrt(static_cast<double>(r)) : static_cast<double>(r));
  }
  // Whether the Linear named name is adapted.
  bool targets(const std::string& name) const;
};

// An adapter: its config and weights "<layer>.lora_A.weight" [r, in] and "<layer>.lora_B.weight"
// [out, r] for each adapted layer, named as in the base model.
struct LoraAdapter {
  LoraConfig config;
  TensorDict weights;
};

// Freezes every parameter of model and gives each targeted Linear a LoRA branch of config's rank,
// scaling and dropout (on the layer's device and dtype; lora_A drawn from gen). Returns the
// adapted layers' names. ValueError when no Linear is targeted (naming the Linear layers there
// are) or model already has LoRA branches.
std::vector<std::string> apply_lora(Module& model, const LoraConfig& config,
                                    Generator* gen = nullptr);
// The LoRA branches' weights of model, keyed as in LoraAdapter::weights (sharing storage).
TensorDict lora_state_dict(Module& model);
// Folds adapter into model's weights: W += scaling * B A for each adapted layer (computed in
// float32, stored in W's dtype). ValueError naming the entry when a layer is missing, not a
// Linear, has a LoRA branch itself, or its shapes disagree, or when an entry lacks its partner
// or is not a LoRA weight; nothing is changed then.
void merge_lora(Module& model, const LoraAdapter& adapter);
// The pairs of adapter's weights by layer name, checked for shape agreement between A and B
// (ValueError naming the entry, as merge_lora).
struct LoraPair {
  std::string layer;
  Tensor a, b;  // [r, in], [out, r]
};
std::vector<LoraPair> lora_pairs(const LoraAdapter& adapter);

}  // namespace tessera::nn

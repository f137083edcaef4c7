#pragma once
// The model registry: each decoder-only family (GPT-2, LLaMA) described once, as data: its name,
// how its config is recognised and read (Tessera's config JSON, Hugging Face's config.json,
// named presets), how a model is built, and which weight name marks its checkpoints. Loaders,
// the CLI and the engine look families up here instead of switching on architecture names; a new
// family is one more entry (and its inference_layout()).
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/models/transformer.h"

namespace tessera::models {

struct ModelFamily {
  std::string_view name;                         // "gpt2", "llama"
  std::vector<std::string_view> hf_model_types;  // Hugging Face model_type values it reads
  std::string_view config_key;                   // a key only this family's Tessera config JSON has
  std::string_view weight_marker;  // a weight name only this family's state dicts hold
  // The layers LoRA adapts unless told otherwise (PEFT's default target_modules for the family).
  std::vector<std::string> lora_targets;
  // A model (weights drawn from gen) from Tessera config JSON; keys the family's config does not
  // have are ignored. ValueError for bad values.
  std::shared_ptr<CausalLM> (*build)(const std::string& config_json, Generator* gen);
  // Tessera config JSON from a Hugging Face config.json object.
  std::string (*config_from_hf)(const std::string& hf_json);
  // The config JSON of a model of this family, or nullopt for another family's model.
  std::optional<std::string> (*config_of)(const CausalLM& model);
  std::vector<std::string> (*preset_names)();
  // A named preset's config JSON; ValueError listing the names otherwise.
  std::string (*preset)(std::string_view name);
};

// Every family, in registration order.
const std::vector<ModelFamily>& model_families();
// The family called name; ValueError "[op] expected model gpt2 or llama, got ..." otherwise.
const ModelFamily& model_family(std::string_view name, std::string_view op = "model");
// The family of model; ValueError naming its type when no family claims it.
const ModelFamily& family_of(const CausalLM& model);
// The family whose Hugging Face model_type is type, or null.
const ModelFamily* family_of_hf_type(std::string_view type);

}  // namespace tessera::models

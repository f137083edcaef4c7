#pragma once
// PEFT's LoRA adapter folders: adapter_config.json (peft_type "LORA", r, lora_alpha,
// lora_dropout, target_modules, use_rslora, ...) and adapter_model.safetensors, whose keys are
// the model's "base_model.model.<layer>.lora_{A,B}.weight". Written by `tessera train --lora-rank`
// and read by `generate --lora` and `serve --lora-modules`: the file names, config keys and
// weight keys PEFT's save_pretrained writes for a model with these module names (Hugging Face's
// for LLaMA and GPT-2).
#include <string>

#include "tessera/nn/lora.h"

namespace tessera::io {

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (each atomically), creating
// dir. base_model goes into base_model_name_or_path.
void save_lora_adapter(const std::string& dir, const nn::LoraAdapter& adapter,
                       const std::string& base_model = "");
// Reads an adapter folder (or its adapter_config.json's path). ValueError "[load_lora_adapter]
// expected ..." for a config that is not JSON or not LoRA, features the engine does not apply
// (DoRA, per-layer rank or alpha patterns, modules_to_save, trained biases), a missing
// adapter_model.safetensors, or weights other than LoRA pairs of one rank.
nn::LoraAdapter load_lora_adapter(const std::string& path);

// adapter_config.json's text for config, and config read from such text (same errors as
// load_lora_adapter).
std::string lora_config_json(const nn::LoraConfig& config, const std::string& base_model = "");
nn::LoraConfig parse_lora_config(const std::string& json);

}  // namespace tessera::io

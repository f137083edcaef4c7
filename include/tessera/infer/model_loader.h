#pragma once
// Loading a GPT-2 or LLaMA for inference from the formats Tessera reads:
//  - llama2.c model files and llm.c GPT-2 checkpoints (any other file; told apart by llm.c's
//    magic),
//  - Tessera training checkpoints: a ckpt_<step> folder or its model.safetensors, or a root
//    holding them (the newest is used); the model config is found in state.json's run config,
//  - safetensors files with Tessera / nanoGPT or Hugging Face names (Hugging Face GPT-2's Conv1D
//    weights [in, out] are transposed), configured by a config.json beside the file (Tessera's
//    GPT2Config / LlamaConfig JSON, or Hugging Face's config.json), or a folder holding
//    model.safetensors and config.json.
// The model comes back in eval mode with float32 weights on the CPU.
#include <memory>
#include <string>

#include "tessera/models/transformer.h"

namespace tessera::infer {

// ValueError "[load_model] expected ..." when the format or config cannot be recognised;
// RuntimeError when a file cannot be read.
std::shared_ptr<models::CausalLM> load_model(const std::string& path);

// A model with what it was read from, for callers that also use the config (the CLI finds there
// the tokenizer a training run recorded).
struct LoadedModel {
  std::shared_ptr<models::CausalLM> model;
  std::string source;  // the file or checkpoint folder the weights came from
  std::string config;  // a checkpoint's run config or the config.json used; "" for .bin files
};
struct LoadOptions {
  // Without weights the model has the architecture alone (its parameters hold whatever their
  // memory held, uncommitted): configs and headers are read and checked (a .bin file's size
  // against its header, a safetensors header), the weights neither read nor converted, for
  // describing a model cheaply.
  bool weights = true;
  // A JSON object merged into the model's config before it is built (vLLM's --hf-overrides, e.g.
  // {"rope_scaling": {"rope_type": "yarn", ...}}), as an RFC 7396 merge patch: nested objects
  // merge, null removes a key. Keys are the config's own: Hugging Face's for a model folder,
  // GPT2Config / LlamaConfig's for Tessera's. ValueError for a file without a config (.bin).
  std::string config_overrides;
};
// load_model, keeping the source and config (with the overrides applied); the same errors.
LoadedModel load_model_with_config(const std::string& path, const LoadOptions& options = {});

// The model's config from a JSON object: Tessera's config JSON (GPT-2 keys such as "n_embd", or
// LLaMA keys such as "dim"; extra keys ignored), Hugging Face's config.json ("model_type" gpt2 or
// llama), or any object nesting one of these (e.g. a training run's config with a "model" entry).
// kind_hint (a registered family name, or "") picks the family when the keys do not.
std::shared_ptr<models::CausalLM> make_model_from_config(const std::string& json,
                                                         const std::string& kind_hint = "");

}  // namespace tessera::infer

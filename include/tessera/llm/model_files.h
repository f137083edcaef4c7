#pragma once
// How Tessera stores a model and finds it again, with its tokenizer: what `tessera generate` /
// `serve` and tessera.llm.LLM load. A training run's folder (train --out) holds
//   config.json       {"arch": "gpt2" | "llama", "model": {<GPT2Config or LlamaConfig>},
//                      "tokenizer": <spec>, "tokenizer_data_dir": <dir>, "train": {<options>}}
//   tokenizer.chars   the vocabulary of a character-level run
//   ckpt_<step>/      checkpoints (tessera/io/checkpoint.h); state.json carries the same config
//   metrics.jsonl, loss.svg
// load_model reads such a folder, one of its checkpoints, a .safetensors file with a
// config.json (or state.json) beside it, an llm.c GPT-2 .bin or a llama2.c model file: the
// weights through infer::load_model, plus the tokenizer the run recorded (or, for a Hugging Face
// model folder, its tokenizer.json).
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/generator.h"
#include "tessera/infer/generation_config.h"
#include "tessera/infer/model_loader.h"
#include "tessera/models/transformer.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::llm {

// A model architecture: "gpt2" with a GPT2Config, or "llama" with a LlamaConfig, as JSON.
struct ModelSpec {
  std::string arch;
  nlohmann::json config;
};

// A freshly initialised model (weights drawn from gen); ValueError naming op for an unknown
// arch or a bad config.
std::shared_ptr<models::CausalLM> build_model(const ModelSpec& spec, Generator* gen,
                                              std::string_view op);
// The spec of a GPT2 or Llama instance.
ModelSpec model_spec(const models::CausalLM& model);

// A tokenizer as recorded with a model: `spec` is a name ("char" is not: char-level runs record
// their .chars file), or a path, relative paths resolved against `base_dir`.
struct TokenizerRef {
  std::string spec;
  std::string data_dir;  // for "gpt2": the folder holding gpt2/encoder.json (empty: default)
  std::string base_dir;
};
// ref.spec with a relative path made absolute against base_dir when that file exists.
std::string resolve_tokenizer_spec(const TokenizerRef& ref);
std::unique_ptr<tokenizers::Tokenizer> load_tokenizer(const TokenizerRef& ref);

// The token ids to start sampling from: text encoded (after the tokenizer's BOS when it has
// one); for an empty text the BOS alone, else the encoding of "\n" (a line start, as nanoGPT
// samples its char-level models), else token 0.
std::vector<int32_t> prompt_ids(const tokenizers::Tokenizer& tokenizer, std::string_view text);

// The ids that end a text: the tokenizer's EOS and BOS (llama2.c's models start each story with
// BOS, so a BOS after text begins another).
std::vector<int32_t> text_end_ids(const tokenizers::Tokenizer& tokenizer);
// Whether id is one of text_end_ids.
bool ends_text(const tokenizers::Tokenizer& tokenizer, int32_t id);

struct LoadedModel {
  std::shared_ptr<models::CausalLM> model;  // float32, eval mode
  ModelSpec spec;
  std::optional<TokenizerRef> tokenizer;  // what the model was trained with, when known
  nlohmann::json run_config;              // config.json / the checkpoint's config, when present
  std::string source;                     // the file or folder the weights came from
  // The model folder's generation_config.json (empty when it has none).
  infer::GenerationConfig generation;

  // The folder of the model's side files (generation_config.json, tokenizer_config.json):
  // source when it is a folder, else the folder holding the file.
  std::string folder() const;
};

// Loads a model from any of the forms listed above (a run folder: its newest checkpoint).
// ValueError "[load_model] ..." when path is none of them. Options as
// infer::load_model_with_config's: without weights, the architecture alone (for reading a
// model's card), and overrides merged into its config.
LoadedModel load_model(const std::string& path, const infer::LoadOptions& options = {});

// The device spec names ("cpu", "cuda", "cuda:N", e.g. a --device option); ValueError naming op
// when this machine (or build) has no such device.
Device device_option(const std::string& spec, std::string_view op);

// The tokenizer to use with loaded: `spec` when given (data_dir: where gpt2's files are), else
// the one the model was trained with. ValueError naming op when there is none, or when its
// vocabulary is not the model's.
std::unique_ptr<tokenizers::Tokenizer> model_tokenizer(const LoadedModel& loaded,
                                                       const std::string& spec,
                                                       const std::string& data_dir,
                                                       std::string_view op);

}  // namespace tessera::llm

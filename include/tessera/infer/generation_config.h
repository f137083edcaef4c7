#pragma once
// A Hugging Face model folder's generation_config.json: the ids that end a reply beside the
// tokenizer's EOS (Llama 3.1 Instruct ends a turn with <|eot_id|> or, after a tool call,
// <|eom_id|>; its tokenizer names only the first), and the sampling settings the model's authors
// recommend (Llama 3.1: temperature 0.6, top_p 0.9; Qwen2.5: 0.7, 0.8, top_k 20, repetition
// penalty 1.05), which a server uses for requests that set none (vLLM's --generation-config
// auto). Only the keys vLLM reads are taken; do_sample and the rest are ignored, as there.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tessera::infer {

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;  // "eos_token_id": an id or a list of them
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_new_tokens;

  // The sampling settings it has, as "temperature=0.6, top_p=0.9" ("" when none).
  std::string describe_sampling() const;
};

// folder/generation_config.json, or an empty config when the folder has none. ValueError naming
// the file for one that is not JSON or holds out-of-range values (a temperature below 0, top_p
// outside (0, 1], a negative id, ...).
GenerationConfig read_generation_config(const std::filesystem::path& folder);

}  // namespace tessera::infer

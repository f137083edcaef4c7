#pragma once
// Hugging Face's tokenizer.json (the `tokenizers` library's format, what model folders on the Hub
// ship) for BPE models: byte-level ones (GPT-2, Llama 3, Qwen2, Mistral NeMo, DeepSeek: a regex
// Split and a ByteLevel pre-tokenizer) and SentencePiece-style ones (Llama 2, Mistral 7B,
// Mixtral, TinyLlama: "▁" for spaces, byte fallback). Encoding follows the library: added tokens
// are split out of the text first (the longest at the earliest position, lstrip / rstrip taking
// the spaces beside them), each span between is normalized (NFC, NFKC, NFD, NFKD, Prepend,
// Replace), pre-tokenized (Split by a regular expression, ByteLevel, Metaspace) and cut into BPE
// tokens (merges by rank; ignore_merges takes a whole word the vocabulary has; byte_fallback
// spells characters it lacks as <0xXX> tokens). Components outside this set are a ValueError
// naming them, never a silently different tokenization. Text is taken as UTF-8; normalizers
// read invalid bytes as U+FFFD (the library accepts only valid UTF-8).
//
//   auto tok = tokenizers::make_tokenizer("Meta-Llama-3-8B/");  // holds tokenizer.json
//   std::vector<int32_t> ids = tok->encode("Hello world", /*add_bos=*/true);
#include <memory>
#include <string>
#include <vector>

#include "tessera/tokenizers/tokenizer.h"

namespace tessera::tokenizers {

class HuggingFaceTokenizer : public Tokenizer {
 public:
  // Reads tokenizer_json_path, and tokenizer_config.json beside it when there is one (its
  // bos_token / eos_token). ValueError for malformed files or unsupported components.
  explicit HuggingFaceTokenizer(const std::string& tokenizer_json_path);
  ~HuggingFaceTokenizer() override;

  std::string decode(std::span<const int32_t> ids) const override;
  std::string token_to_string(int32_t id, int32_t prev = -1) const override;
  int64_t vocab_size() const override;
  // The special token the post-processor puts first (Llama's <s>, Llama 3's <|begin_of_text|>),
  // else tokenizer_config.json's bos_token when add_bos_token is true; none for GPT-2 and Qwen2,
  // whose tokenizers add nothing.
  std::optional<int32_t> bos_id() const override;
  // tokenizer_config.json's eos_token, else the post-processor's last special token.
  std::optional<int32_t> eos_id() const override;
  std::string_view name() const override { return "HuggingFaceTokenizer"; }
  // The added tokens marked special (what chat templates write: "<|im_start|>", "</s>").
  std::vector<Special> special_tokens() const;

 protected:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::tokenizers

#pragma once
// A SentencePiece `.model` through libsentencepiece (kept out of this header).
#include <memory>
#include <string>

#include "tessera/tokenizers/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessera::tokenizers {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::string decode(std::span<const int32_t> ids) const override;
  // The piece with U+2581 as a space, byte pieces as their byte, control pieces as nothing, and
  // no leading space right after BOS (like llama2.c's streaming decode).
  std::string token_to_string(int32_t id, int32_t prev = -1) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> bos_id() const override;
  std::optional<int32_t> eos_id() const override;
  std::string_view name() const override { return "SentencePieceTokenizer"; }

 protected:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace tessera::tokenizers

#pragma once
// GPT-2 byte-level BPE (encoder.json + vocab.bpe), identical to OpenAI's encoder.py: text is
// split by the GPT-2 pre-tokenization regex, each piece's UTF-8 bytes start as one token each,
// and merges apply in rank order. Any byte string round-trips exactly, invalid UTF-8 included.
#include <array>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/tokenizers/tokenizer.h"

namespace tessera::tokenizers {

// Splits text like GPT-2's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \p{L}/\p{N} the Unicode general categories L*/N* and \s Unicode White_Space (as in the
// Python `regex` module the reference uses). A byte of invalid UTF-8 counts as one character
// that is neither letter, number nor space. The pieces concatenate back to text.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

// GPT-2's reversible byte -> printable character table (encoder.json keys are written in it).
const std::array<char32_t, 256>& gpt2_byte_to_unicode();
// Its inverse: the byte a character of that alphabet stands for, or -1 for other characters.
int gpt2_unicode_to_byte(char32_t cp);

class GPT2Tokenizer : public Tokenizer {
 public:
  GPT2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  // Loads dir/encoder.json and dir/vocab.bpe.
  static std::unique_ptr<GPT2Tokenizer> from_directory(const std::string& dir);

  std::string decode(std::span<const int32_t> ids) const override;
  std::string token_to_string(int32_t id, int32_t prev = -1) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  // <|endoftext|> both starts and ends documents in GPT-2 training data.
  std::optional<int32_t> bos_id() const override { return end_of_text_; }
  std::optional<int32_t> eos_id() const override { return end_of_text_; }
  std::string_view name() const override { return "GPT2Tokenizer"; }
  // The raw bytes of a token.
  const std::string& token_bytes(int32_t id) const;

 protected:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  void load_merges(const std::string& vocab_bpe_path);
  // BPE of one pre-tokenized piece, memoised.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;  // id -> bytes
  std::unordered_map<std::string, int32_t> ids_;
  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
  std::optional<int32_t> end_of_text_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tessera::tokenizers

#pragma once
// llama2.c's tokenizer.bin (a SentencePiece BPE vocabulary exported with scores) and its encode:
// a " " dummy prefix, one token per UTF-8 character with <0xXX> byte fallback, then greedy
// merges of the adjacent pair whose merged piece scores best (ties: leftmost).
//
// Two deliberate differences from run.c, both matching SentencePiece: byte, <unk>, <s> and </s>
// pieces never take part in merges (run.c would turn literal text "<0x41>" into the byte A), and
// decode()/token_to_string() print BOS/EOS as nothing rather than the exported "\n<s>\n".
#include <array>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/tokenizers/tokenizer.h"

namespace tessera::tokenizers {

class Llama2cTokenizer : public Tokenizer {
 public:
  // File layout: int32 max_token_length, then per token: float32 score, int32 length, bytes.
  explicit Llama2cTokenizer(const std::string& path);

  // SentencePiece-style: BOS/EOS drop out, the dummy-prefix space of the first piece is removed.
  std::string decode(std::span<const int32_t> ids) const override;
  // run.c's decode: the piece, without its leading space right after BOS; <0xXX> as the byte.
  std::string token_to_string(int32_t id, int32_t prev = -1) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  std::optional<int32_t> bos_id() const override { return 1; }
  std::optional<int32_t> eos_id() const override { return 2; }
  std::string_view name() const override { return "Llama2cTokenizer"; }

  const std::string& piece(int32_t id) const;
  float score(int32_t id) const;
  int32_t max_token_length() const { return max_token_length_; }

 protected:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;

 private:
  // Appends the id of piece s, or its bytes as byte-fallback tokens.
  void push_piece(std::string_view s, std::vector<int32_t>& out) const;
  bool is_special(int32_t id) const { return id < 3 || byte_of_[id] >= 0; }

  int32_t max_token_length_ = 0;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int16_t> byte_of_;                  // id -> byte for <0xXX> pieces, else -1
  std::array<int32_t, 256> byte_ids_;             // byte -> its <0xXX> id, or -1
  std::unordered_map<std::string, int32_t> ids_;  // mergeable pieces only
};

}  // namespace tessera::tokenizers

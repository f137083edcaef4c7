#pragma once
// Character-level tokenizer as in nanoGPT's shakespeare_char: the vocabulary is the sorted set
// of Unicode characters (codepoints) of a training text, and id i is the i-th character.
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/tokenizers/tokenizer.h"

namespace tessera::tokenizers {

class CharTokenizer : public Tokenizer {
 public:
  // Vocabulary from the characters of text (valid UTF-8; ValueError otherwise).
  explicit CharTokenizer(std::string_view text);
  // Vocabulary saved by save() (a ".chars" file: a header line, then the characters as UTF-8).
  static CharTokenizer load(const std::string& path);
  // Writes the vocabulary atomically (temp file, fsync, rename).
  void save(const std::string& path) const;

  std::string token_to_string(int32_t id, int32_t prev = -1) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(chars_.size()); }
  std::string_view name() const override { return "CharTokenizer"; }
  // The vocabulary in id order.
  const std::vector<char32_t>& chars() const { return chars_; }

 protected:
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;

 private:
  CharTokenizer() = default;
  void index();

  std::vector<char32_t> chars_;
  std::unordered_map<char32_t, int32_t> ids_;
};

}  // namespace tessera::tokenizers

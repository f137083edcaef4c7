#pragma once
// The tokenizer interface shared by the character, GPT-2 BPE, llama2.c and SentencePiece
// tokenizers, and make_tokenizer, which picks one from a name or a path.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::tokenizers {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of text, optionally framed by BOS/EOS (ValueError if the tokenizer has none).
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false,
                              bool add_eos = false) const;
  // A special token's text and id: what a chat template writes as "</s>" is one id.
  struct Special {
    std::string text;
    int32_t id;
  };
  // As encode, but each occurrence of a special's text becomes its id (the earliest, longest
  // match first) and the text between is encoded piece by piece, as Hugging Face's tokenizers
  // split special tokens out before tokenizing.
  std::vector<int32_t> encode_with_specials(std::string_view text,
                                            std::span<const Special> specials) const;
  // The text of a sequence of ids; IndexError for ids outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const;
  // The bytes one token adds to a stream after token prev (-1: none), for printing as tokens
  // are generated. Byte-level tokens may hold part of a UTF-8 character.
  virtual std::string token_to_string(int32_t id, int32_t prev = -1) const = 0;

  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const { return std::nullopt; }
  virtual std::optional<int32_t> eos_id() const { return std::nullopt; }
  // Names the tokenizer in error messages, e.g. "GPT2Tokenizer".
  virtual std::string_view name() const = 0;

 protected:
  // Appends the ids of text (no BOS/EOS) to out.
  virtual void encode_into(std::string_view text, std::vector<int32_t>& out) const = 0;
  // Throws IndexError "[<name>.<op>] ..." unless 0 <= id < vocab_size().
  void check_id(int32_t id, std::string_view op) const;
};

struct TokenizerOptions {
  // Folder searched for gpt2/encoder.json and gpt2/vocab.bpe by make_tokenizer("gpt2"); when
  // empty, the environment variable TESSERA_DATA_DIR is used.
  std::string data_dir;
  // Text whose characters form the vocabulary of make_tokenizer("char").
  std::string char_corpus;
};

// "char" (CharTokenizer over options.char_corpus), "gpt2" (encoder.json + vocab.bpe from
// options.data_dir), or a path: a folder holding encoder.json and vocab.bpe (GPT-2) or a Hugging
// Face tokenizer.json, a tokenizer ".json" itself, a llama2.c tokenizer ".bin", a SentencePiece
// ".model", or a saved CharTokenizer ".chars".
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec,
                                          const TokenizerOptions& options = {});

}  // namespace tessera::tokenizers

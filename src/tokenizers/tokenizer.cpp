#include "tessera/tokenizers/tokenizer.h"

#include <cstdlib>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "tessera/tokenizers/hf_tokenizer.h"
#include "tessera/tokenizers/llama2c_tokenizer.h"
#include "tessera/tokenizers/sentencepiece_tokenizer.h"

namespace tessera::tokenizers {

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool add_eos) const {
  std::vector<int32_t> ids;
  if (add_bos) {
    TESSERA_CHECK(bos_id().has_value(), ValueError, "[", name(),
                  ".encode] expected a tokenizer with a BOS token for add_bos, got none");
    ids.push_back(*bos_id());
  }
  encode_into(text, ids);
  if (add_eos) {
    TESSERA_CHECK(eos_id().has_value(), ValueError, "[", name(),
                  ".encode] expected a tokenizer with an EOS token for add_eos, got none");
    ids.push_back(*eos_id());
  }
  return ids;
}

std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view text,
                                                     std::span<const Special> specials) const {
  std::vector<int32_t> ids;
  while (!text.empty()) {
    size_t at = std::string_view::npos;
    const Special* found = nullptr;
    for (const Special& s : specials) {
      if (s.text.empty()) continue;
      const size_t i = text.find(s.text);
      if (i < at ||
          (i == at && i != std::string_view::npos && s.text.size() > found->text.size())) {
        at = i;
        found = &s;
      }
    }
    if (found == nullptr) {
      encode_into(text, ids);
      break;
    }
    if (at > 0) encode_into(text.substr(0, at), ids);
    ids.push_back(found->id);
    text.remove_prefix(at + found->text.size());
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += token_to_string(id, prev);
    prev = id;
  }
  return out;
}

void Tokenizer::check_id(int32_t id, std::string_view op) const {
  TESSERA_CHECK(id >= 0 && id < vocab_size(), IndexError, "[", name(), ".", op,
                "] expected token ids in [0, ", vocab_size(), "), got ", id);
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, const TokenizerOptions& options) {
  namespace fs = std::filesystem;
  if (spec == "char") {
    TESSERA_CHECK(!options.char_corpus.empty(), ValueError,
                  "[make_tokenizer] expected options.char_corpus for 'char', got an empty text");
    return std::make_unique<CharTokenizer>(options.char_corpus);
  }
  if (spec == "gpt2") {
    std::string dir = options.data_dir;
    if (dir.empty()) {
      const char* env = std::getenv("TESSERA_DATA_DIR");
      dir = env ? env : "";
    }
    TESSERA_CHECK(!dir.empty(), ValueError,
                  "[make_tokenizer] expected options.data_dir or TESSERA_DATA_DIR for 'gpt2', "
                  "got neither");
    for (const fs::path& d : {fs::path(dir) / "gpt2", fs::path(dir)}) {
      if (fs::exists(d / "encoder.json") && fs::exists(d / "vocab.bpe"))
        return GPT2Tokenizer::from_directory(d.string());
    }
    throw ValueError(detail::str("[make_tokenizer] expected encoder.json and vocab.bpe in '", dir,
                                 "/gpt2' or '", dir, "', got neither"));
  }
  const fs::path path(spec);
  TESSERA_CHECK(fs::exists(path), ValueError,
                "[make_tokenizer] expected 'char', 'gpt2' or an existing path, got '", spec, "'");
  if (fs::is_directory(path)) {
    if (fs::exists(path / "encoder.json") && fs::exists(path / "vocab.bpe"))
      return GPT2Tokenizer::from_directory(path.string());
    TESSERA_CHECK(fs::exists(path / "tokenizer.json"), ValueError,
                  "[make_tokenizer] expected a folder holding tokenizer.json (Hugging Face) or "
                  "encoder.json and vocab.bpe (GPT-2), got '",
                  spec, "'");
    return std::make_unique<HuggingFaceTokenizer>((path / "tokenizer.json").string());
  }
  const std::string ext = path.extension().string();
  if (ext == ".json") return std::make_unique<HuggingFaceTokenizer>(path.string());
  if (ext == ".bin") return std::make_unique<Llama2cTokenizer>(path.string());
  if (ext == ".model") return std::make_unique<SentencePieceTokenizer>(path.string());
  if (ext == ".chars") return std::make_unique<CharTokenizer>(CharTokenizer::load(path.string()));
  throw ValueError(detail::str("[make_tokenizer] expected a .bin (llama2.c), .model ",
                               "(SentencePiece), .json (Hugging Face tokenizer.json) or .chars ",
                               "(CharTokenizer) file, got '", spec, "'"));
}

}  // namespace tessera::tokenizers

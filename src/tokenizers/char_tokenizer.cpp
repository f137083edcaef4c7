#include "tessera/tokenizers/char_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <set>
#include <sstream>

#include "tessera/io/atomic_file.h"
#include "tessera/core/error.h"
#include "tokenizers/utf8.h"

namespace tessera::tokenizers {
namespace {

constexpr std::string_view kHeader = "tessera-char-tokenizer 1\n";

std::string codepoint_name(char32_t cp) {
  std::ostringstream os;
  os << "U+" << std::uppercase << std::hex << std::setw(4) << std::setfill('0')
     << static_cast<uint32_t>(cp);
  return os.str();
}

// Calls f(codepoint, byte offset) for each character; ValueError on invalid UTF-8.
template <class F>
void for_each_char(std::string_view text, std::string_view op, F&& f) {
  for (size_t i = 0; i < text.size();) {
    const detail::Utf8Char c = detail::next_utf8(text, i);
    TESSERA_CHECK(c.cp != detail::kInvalidCodepoint, ValueError, "[CharTokenizer.", op,
                  "] expected valid UTF-8 text, got an invalid byte ",
                  detail::hex_byte(static_cast<uint8_t>(text[i])), " at offset ", i);
    f(c.cp, i);
    i += c.len;
  }
}

}  // namespace

CharTokenizer::CharTokenizer(std::string_view text) {
  std::set<char32_t> seen;
  for_each_char(text, "build", [&](char32_t cp, size_t) { seen.insert(cp); });
  chars_.assign(seen.begin(), seen.end());
  index();
}

void CharTokenizer::index() {
  ids_.clear();
  for (size_t i = 0; i < chars_.size(); ++i) ids_.emplace(chars_[i], static_cast<int32_t>(i));
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, RuntimeError, "[CharTokenizer.load] expected a readable file, got '", path,
                "'");
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TESSERA_CHECK(data.starts_with(kHeader), ValueError, "[CharTokenizer.load] expected a file ",
                "starting with '", kHeader.substr(0, kHeader.size() - 1), "', got '", path, "'");
  CharTokenizer tok;
  for_each_char(std::string_view(data).substr(kHeader.size()), "load",
                [&](char32_t cp, size_t) { tok.chars_.push_back(cp); });
  TESSERA_CHECK(std::is_sorted(tok.chars_.begin(), tok.chars_.end()) &&
                    std::adjacent_find(tok.chars_.begin(), tok.chars_.end()) == tok.chars_.end(),
                ValueError, "[CharTokenizer.load] expected sorted unique characters, got '", path,
                "'");
  tok.index();
  return tok;
}

void CharTokenizer::save(const std::string& path) const {
  std::string data(kHeader);
  for (char32_t cp : chars_) detail::append_utf8(data, cp);
  io::write_file_atomic(path, data, "CharTokenizer.save");
}

void CharTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  for_each_char(text, "encode", [&](char32_t cp, size_t offset) {
    const auto it = ids_.find(cp);
    TESSERA_CHECK(it != ids_.end(), ValueError,
                  "[CharTokenizer.encode] expected characters of the vocabulary, got ",
                  codepoint_name(cp), " at byte offset ", offset);
    out.push_back(it->second);
  });
}

std::string CharTokenizer::token_to_string(int32_t id, int32_t) const {
  check_id(id, "token_to_string");
  std::string s;
  detail::append_utf8(s, chars_[id]);
  return s;
}

}  // namespace tessera::tokenizers

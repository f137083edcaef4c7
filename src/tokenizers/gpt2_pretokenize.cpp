// The GPT-2 pre-tokenizer, written by hand because std::regex has no Unicode classes.
// Character classes come from ICU (u_charType / u_isUWhiteSpace), the same Unicode database
// the reference regex engines use; ASCII takes a fast path.
#include <unicode/uchar.h>

#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "tokenizers/utf8.h"

namespace tessera::tokenizers {
namespace {

enum class CharClass : uint8_t { Letter, Number, Space, Other };

CharClass classify(char32_t cp) {
  if (cp == detail::kInvalidCodepoint) return CharClass::Other;
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return CharClass::Space;
    return CharClass::Other;
  }
  const UChar32 c = static_cast<UChar32>(cp);
  const uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) return CharClass::Letter;
  if (mask & U_GC_N_MASK) return CharClass::Number;
  if (u_isUWhiteSpace(c)) return CharClass::Space;
  return CharClass::Other;
}

struct Char {
  char32_t cp;
  CharClass cls;
};

// End (exclusive, in characters) of the regex match starting at character i. The alternatives
// are tried in the regex's order; only the whitespace ones need lookahead.
size_t match_end(const std::vector<Char>& c, size_t i) {
  const size_t n = c.size();
  const auto cp = [&](size_t k) { return k < n ? c[k].cp : char32_t{0}; };
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, ASCII apostrophe only)
  if (cp(i) == '\'') {
    const char32_t a = cp(i + 1), b = cp(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
  const size_t k = (cp(i) == ' ' && i + 1 < n && c[i + 1].cls != CharClass::Space) ? i + 1 : i;
  if (c[k].cls != CharClass::Space) {
    size_t j = k;
    while (j < n && c[j].cls == c[k].cls) ++j;
    return j;
  }
  // `\s+(?!\S)` backs off one character so the last space can prefix the next word; a single
  // space before a non-space falls through to `\s+` and matches alone.
  size_t j = i;
  while (j < n && c[j].cls == CharClass::Space) ++j;
  if (j == n || j - i == 1) return j;
  return j - 1;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<Char> chars;
  std::vector<size_t> offsets;  // byte offset of each character, plus the end
  chars.reserve(text.size());
  offsets.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    const detail::Utf8Char u = detail::next_utf8(text, i);
    chars.push_back({u.cp, classify(u.cp)});
    offsets.push_back(i);
    i += u.len;
  }
  offsets.push_back(text.size());
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < chars.size();) {
    const size_t j = match_end(chars, i);
    pieces.push_back(text.substr(offsets[i], offsets[j] - offsets[i]));
    i = j;
  }
  return pieces;
}

}  // namespace tessera::tokenizers

#include "tokenizers/utf8.h"

namespace tessera::detail {

Utf8Char next_utf8(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return {b0, 1};
  // Length and the allowed range of the second byte (excludes overlongs, surrogates and
  // codepoints above U+10FFFF, as in the Unicode "well-formed" table).
  int len = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kInvalidCodepoint, 1};
  }
  if (i + len > s.size()) return {kInvalidCodepoint, 1};
  if (byte(i + 1) < lo || byte(i + 1) > hi) return {kInvalidCodepoint, 1};
  char32_t cp = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const uint8_t b = byte(i + k);
    if ((b & 0xC0) != 0x80) return {kInvalidCodepoint, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string hex_byte(uint8_t b) {
  constexpr char kDigits[] = "0123456789ABCDEF";
  return {'0', 'x', kDigits[b >> 4], kDigits[b & 15]};
}

int byte_token_value(std::string_view s) {
  if (s.size() != 6 || !s.starts_with("<0x") || s[5] != '>') return -1;
  int v = 0;
  for (char ch : s.substr(3, 2)) {
    const int d = (ch >= '0' && ch <= '9')   ? ch - '0'
                  : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                  : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                                             : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  size_t start = 0;
  for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, start)) {
    out.append(s.substr(start, at - start)).append(to);
    start = at + from.size();
  }
  return out.append(s.substr(start));
}

}  // namespace tessera::detail

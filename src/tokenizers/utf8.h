#pragma once
// Strict UTF-8 decoding, and the small text helpers, shared by the tokenizers. Invalid input (stray
// continuation bytes, overlong forms, surrogates, values above U+10FFFF, truncated sequences)
// decodes one byte at a time as kInvalidCodepoint, so byte-level tokenizers can still carry it
// through unchanged.
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::detail {

inline constexpr char32_t kInvalidCodepoint = 0xFFFFFFFF;

struct Utf8Char {
  char32_t cp;  // kInvalidCodepoint for a byte that starts no valid sequence
  int len;      // bytes consumed, 1..4
};

// The character starting at byte i of s (i < s.size()).
Utf8Char next_utf8(std::string_view s, size_t i);
// Appends the UTF-8 encoding of a valid codepoint.
void append_utf8(std::string& out, char32_t cp);
// "0x3F": a byte as it appears in error messages and in <0x3F> byte tokens.
std::string hex_byte(uint8_t b);
// The byte of an exact "<0xXX>" byte token (either case of hex digit), or -1.
int byte_token_value(std::string_view s);
// s with every occurrence of from (non-overlapping, left to right) replaced by to; s itself when
// from is empty.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace tessera::detail

#pragma once
// JSON from untrusted text (request bodies, file headers): nlohmann parses and frees without
// recursion, but dump() recurses once per nesting level, so a few hundred KB of '[' would
// overflow the stack wherever a value is printed (an error message, a checksum). Text nested
// deeper than kMaxJsonDepth parses as discarded, like invalid JSON.
#include <nlohmann/json.hpp>
#include <string_view>

namespace tessera {

inline constexpr int kMaxJsonDepth = 256;

// Whether text's arrays and objects nest at most limit deep (brackets inside strings ignored).
inline bool json_nesting_within(std::string_view text, int limit = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// nlohmann::json::parse without exceptions: discarded when text is not JSON or nests deeper
// than kMaxJsonDepth.
inline nlohmann::json parse_json(std::string_view text) {
  if (!json_nesting_within(text)) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace tessera

#pragma once
// Shared by the parsers of a model's output (tool calls, reasoning): spaces, and the end of a
// growing text that may be the start of a marker the model is still writing.
#include <algorithm>
#include <cctype>
#include <string_view>

namespace tessera::serve::detail {

// The first index at or after i that is not a space.
inline size_t skip_space(std::string_view s, size_t i = 0) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// The length of the longest end of text that is a proper prefix of marker: held back from what
// a stream sends until the next text tells whether the marker follows.
inline size_t marker_start_held(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (marker.starts_with(text.substr(text.size() - n))) return n;
  return 0;
}

}  // namespace tessera::serve::detail

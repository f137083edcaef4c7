#pragma once
// Whether a structured-output grammar takes a text, for the grammar tests.
#include <memory>
#include <string_view>

#include "tessera/infer/structured_output.h"

namespace tessera::testing {

// The whole text is one complete value (or sentence) of the grammar.
inline bool matches(const std::shared_ptr<const infer::JsonGrammar>& g, std::string_view text) {
  infer::JsonMatcher m(g);
  return m.advance(text) && m.accepting();
}

// The text is a prefix of some value of the grammar.
inline bool prefix(const std::shared_ptr<const infer::JsonGrammar>& g, std::string_view text) {
  infer::JsonMatcher m(g);
  return m.advance(text);
}

}  // namespace tessera::testing

#pragma once
// What the structured-output targets check while feeding text to a JsonMatcher (JSON Schemas,
// GBNF grammars): for each of the first 64 prefixes, the token mask over the synthetic GPT-2
// vocabulary equals trying every token's bytes on a copy of the matcher; a byte the matcher
// refuses leaves it as it was.
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "tessera/infer/structured_output.h"

namespace tessera::fuzz {

inline void check_mask(const infer::TokenMasker& masker, const infer::JsonMatcher& m,
                       std::string_view input) {
  std::vector<uint8_t> allowed;
  masker.allowed_tokens(m, allowed);
  for (int32_t t = 0; t < masker.vocab_size(); ++t) {
    infer::JsonMatcher copy = m;
    const std::string_view b = masker.bytes(t);
    if ((allowed[static_cast<size_t>(t)] != 0) != (!b.empty() && copy.advance(b)))
      fail("the token mask disagrees with the matcher on token " + std::to_string(t), input);
  }
}

// Feeds text to m byte by byte with the checks above; the bytes it took.
inline std::string feed_checked(infer::JsonMatcher& m, std::string_view text,
                                std::string_view input) {
  static const infer::TokenMasker masker(synthetic_gpt2(), {});
  std::string taken;
  for (char c : text) {
    if (taken.size() < 64) check_mask(masker, m, input);
    const bool accepting = m.accepting();
    if (m.advance(std::string_view(&c, 1))) {
      taken += c;
    } else if (m.accepting() != accepting) {
      fail("a refused byte changed the matcher", input);
    }
  }
  return taken;
}

}  // namespace tessera::fuzz

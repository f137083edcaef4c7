// Regular expressions: a pattern (first part) compiled by RegexDfa, both as a whole-text match
// and as a search, their intersection and the first with length bounds, and text (second part)
// run through each. A refused pattern must be a typed
// error. Every state the text reaches must still lead to a match (the DFA was pruned), a final
// state must accept and take no byte, and a prefix the DFA accepts must be valid UTF-8.
#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/infer/regex.h"
#include "tokenizers/utf8.h"

namespace {

using namespace tessera;
using infer::RegexDfa;

// Whether some path of bytes leads from state to an accepting state.
bool can_match(const RegexDfa& dfa, int32_t state) {
  std::vector<uint8_t> seen(static_cast<size_t>(dfa.num_states()), 0);
  std::vector<int32_t> stack{state};
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (dfa.accepting(s)) return true;
    if (seen[static_cast<size_t>(s)]++) continue;
    for (int c = 0; c < 256; ++c)
      if (const int32_t t = dfa.step(s, static_cast<uint8_t>(c)); t != RegexDfa::kDead)
        stack.push_back(t);
  }
  return false;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const detail::Utf8Char c = detail::next_utf8(s, i);
    if (c.cp == detail::kInvalidCodepoint) return false;
    i += static_cast<size_t>(c.len);
  }
  return true;
}

void check(const RegexDfa& dfa, std::string_view text, std::string_view input) {
  int32_t s = dfa.start();
  for (size_t i = 0; i <= text.size(); ++i) {
    if (dfa.accepting(s) && !valid_utf8(text.substr(0, i)))
      fuzz::fail("the DFA accepted text that is not UTF-8", input);
    if (dfa.final(s)) {
      if (!dfa.accepting(s)) fuzz::fail("a final state that does not accept", input);
      for (int c = 0; c < 256; ++c)
        if (dfa.step(s, static_cast<uint8_t>(c)) != RegexDfa::kDead)
          fuzz::fail("a final state that takes a byte", input);
    }
    if (i == text.size()) break;
    const int32_t next = dfa.step(s, static_cast<uint8_t>(text[i]));
    if (next == RegexDfa::kDead) break;
    s = next;
  }
  if (!can_match(dfa, s)) fuzz::fail("a state from which nothing matches", input);
}

// Whether the whole text is a match.
bool accepts(const RegexDfa& dfa, std::string_view text) {
  int32_t s = dfa.start();
  for (const char c : text)
    if ((s = dfa.step(s, static_cast<uint8_t>(c))) == RegexDfa::kDead) return false;
  return dfa.accepting(s);
}

size_t code_points(std::string_view text) {
  size_t n = 0;
  for (const char c : text) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::bytes(data, size);
  const std::vector<std::string_view> parts = fuzz::split_parts(input, 2);
  if (parts[0].size() > 256) return 0;  // repeats of large patterns take long to expand
  const std::string_view text = parts[1].substr(0, 512);
  std::shared_ptr<const RegexDfa> dfas[2];
  for (const RegexDfa::Match match : {RegexDfa::Match::Full, RegexDfa::Match::Search}) {
    try {
      const auto dfa = RegexDfa::compile(parts[0], match);
      check(*dfa, text, input);
      dfas[match == RegexDfa::Match::Search] = dfa;
    } catch (const Error& e) {
      fuzz::rejected(e);
    }
  }
  if (!dfas[0] || !dfas[1]) return 0;
  // Products: the whole-text DFA with the search one (the same texts), and with lengths.
  const int64_t lo = static_cast<int64_t>(size % 4), hi = size % 3 == 0 ? -1 : lo + size % 5;
  const bool full = accepts(*dfas[0], text);
  const auto chars = static_cast<int64_t>(code_points(text));
  try {
    const auto both = RegexDfa::intersect(*dfas[0], *dfas[1]);
    check(*both, text, input);
    if (accepts(*both, text) != full) fuzz::fail("an intersection that differs from both", input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  try {
    const auto bounded = RegexDfa::with_length(*dfas[0], lo, hi);
    check(*bounded, text, input);
    if (accepts(*bounded, text) != (full && chars >= lo && (hi < 0 || chars <= hi)))
      fuzz::fail("length bounds that differ from counting", input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}

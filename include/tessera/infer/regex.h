#pragma once
// Regular expressions as byte-level DFAs, for constrained generation: vLLM's guided_regex
// (structured_outputs.regex) and JSON Schema's `pattern`. The pattern is parsed over Unicode code
// points and compiled into an automaton over the UTF-8 bytes of the text (Thompson NFA, subset
// construction, states that cannot reach a match removed), so every state it reaches can still
// end in a match, a token's bytes step through it one table lookup each, and the text it takes
// is always valid UTF-8.
//
//   auto dfa = infer::RegexDfa::compile(R"(\d{3}-\d{4})", infer::RegexDfa::Match::Full);
//   int32_t s = dfa->start();
//   for (char c : std::string("555-0199")) s = dfa->step(s, static_cast<uint8_t>(c));
//   // s != RegexDfa::kDead && dfa->accepting(s)
//
// Syntax (the common subset of ECMAScript, which JSON Schema names, and Python's re): literals,
// `.` (any character but \n, \r, U+2028 and U+2029), classes `[a-z]` / `[^...]` with ranges and
// escapes, `\d \D \w \W \s \S` (ASCII digits and word characters, ECMAScript's white space),
// `\n \r \t \f \v \0 \xHH \uHHHH`, escaped punctuation, groups `(...)`, `(?:...)`,
// `(?P<name>...)`, `(?<name>...)`, alternation, `* + ? {n} {n,} {n,m}` (a lazy `?` after them
// changes nothing for whether a whole text matches), and `^` / `$` at the start / end of the
// pattern or of a top-level alternative. Lookaround, backreferences, word boundaries, flags,
// possessive quantifiers and Unicode properties are a ValueError "[Regex] ..." naming them and
// the position, as are patterns that match nothing or need more than kMaxStates states.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace tessera::infer {

class RegexDfa {
 public:
  // Full: the whole text must match (guided_regex; ^ and $ change nothing). Search: some part of
  // the text must match, as JSON Schema's pattern (ECMAScript's RegExp.test): an alternative
  // without a leading ^ may have any text before it, one without a trailing $ any text after.
  enum class Match { Full, Search };
  static constexpr int32_t kDead = -1;
  static constexpr int64_t kMaxStates = 10000;

  static std::shared_ptr<const RegexDfa> compile(std::string_view pattern, Match match);

  // Products, for a JSON Schema string with several constraints (a ValueError when no text
  // satisfies them all, or when the product's table, states x byte classes, would have more than
  // kMaxProductEntries entries). The texts both a and b match (a pattern and a format); regular
  // expressions only, not grammar rules.
  static constexpr int64_t kMaxProductEntries = int64_t{1} << 22;
  static std::shared_ptr<const RegexDfa> intersect(const RegexDfa& a, const RegexDfa& b);
  // The texts of dfa with min_chars to max_chars (< 0: no maximum) code points (a pattern with
  // minLength / maxLength): counted in the automaton, so no bound can strand a text that the
  // pattern alone would let go on.
  static std::shared_ptr<const RegexDfa> with_length(const RegexDfa& dfa, int64_t min_chars,
                                                     int64_t max_chars);

  int32_t start() const { return 0; }
  // The state after byte c, or kDead when no match can follow.
  int32_t step(int32_t state, uint8_t c) const {
    return next_[static_cast<size_t>(state) * classes_ + byte_class_[c]];
  }
  // The text so far matches.
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // It matches and no byte can follow (the generation is over).
  bool final(int32_t state) const { return final_[static_cast<size_t>(state)] != 0; }
  int64_t num_states() const { return static_cast<int64_t>(accepting_.size()); }
  // Bytes of one class step alike from every state.
  uint8_t byte_class(uint8_t c) const { return byte_class_[c]; }
  int64_t num_classes() const { return static_cast<int64_t>(classes_); }

  // A grammar rule's DFA (cfg_grammar.h) may also, in a state, call another rule and go on in
  // state `next` once that rule has matched; a regex's never does. final() counts calls too.
  struct Call {
    int32_t rule, next;
  };
  bool has_calls() const { return !calls_.empty(); }
  std::span<const Call> calls(int32_t state) const {
    const auto s = static_cast<size_t>(state);
    return {calls_.data() + calls_begin_[s], calls_begin_[s + 1] - calls_begin_[s]};
  }

 private:
  friend class RegexDfaBuilder;
  // The product with another automaton over bytes (regex_product.cpp).
  template <class Other>
  static std::shared_ptr<const RegexDfa> product(const RegexDfa& a, const Other& b,
                                                 std::string_view what);
  // Removes the states from which no match can be reached (renumbered in order, the start stays
  // 0) and marks the final ones; calls_begin_ holds each state's begin. ValueError naming `what`
  // when the start is among them.
  void remove_dead_states(std::string_view what);

  std::array<uint8_t, 256> byte_class_{};  // bytes no part of the pattern tells apart share one
  size_t classes_ = 0;
  std::vector<int32_t> next_;  // [state][class]
  std::vector<uint8_t> accepting_, final_;
  std::vector<size_t> calls_begin_;  // [state], one past the last state too
  std::vector<Call> calls_;
};

}  // namespace tessera::infer

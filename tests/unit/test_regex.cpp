// RegexDfa: whole-text and search matches against std::regex (ECMAScript) on random patterns and
// texts, UTF-8 classes, final states, and the errors for what it does not support.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "tessera/core/error.h"
#include "tessera/infer/regex.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using infer::RegexDfa;

// The state after the whole text, or kDead.
int32_t run(const RegexDfa& dfa, std::string_view text) {
  int32_t s = dfa.start();
  for (char c : text) {
    s = dfa.step(s, static_cast<uint8_t>(c));
    if (s == RegexDfa::kDead) break;
  }
  return s;
}

bool full_match(std::string_view pattern, std::string_view text) {
  const auto dfa = RegexDfa::compile(pattern, RegexDfa::Match::Full);
  const int32_t s = run(*dfa, text);
  return s != RegexDfa::kDead && dfa->accepting(s);
}

bool search_match(std::string_view pattern, std::string_view text) {
  const auto dfa = RegexDfa::compile(pattern, RegexDfa::Match::Search);
  const int32_t s = run(*dfa, text);
  return s != RegexDfa::kDead && dfa->accepting(s);
}

// A random pattern over a small alphabet, from the constructs both syntaxes share.
std::string random_pattern(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto atom = [&]() -> std::string {
    switch (pick(depth > 2 ? 8 : 10)) {
      case 0:
        return "a";
      case 1:
        return "b";
      case 2:
        return ".";
      case 3:
        return "[ab]";
      case 4:
        return "[^a]";
      case 5:
        return "\\d";
      case 6:
        return "[a-c1]";
      case 7:
        return "\\s";
      case 8:
        return "(" + random_pattern(rng, depth + 1) + ")";
      default:
        return "(?:" + random_pattern(rng, depth + 1) + "|" + random_pattern(rng, depth + 1) + ")";
    }
  };
  std::string out;
  const int items = 1 + pick(3);
  for (int i = 0; i < items; ++i) {
    out += atom();
    static const char* kQuantifiers[] = {"", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,}", "*?"};
    out += kQuantifiers[pick(10)];
  }
  if (depth == 0 && pick(4) == 0) out = "^" + out;
  if (depth == 0 && pick(4) == 0) out += "$";
  if (depth == 0 && pick(5) == 0) out += "|" + random_pattern(rng, 1);
  return out;
}

TEST(RegexDfa, MatchesAsStdRegexOnRandomPatternsAndTexts) {
  std::mt19937 rng(7);
  const char alphabet[] = {'a', 'b', 'c', '1', ' ', '\n'};
  int matched = 0, searched = 0, too_large = 0;
  for (int p = 0; p < 300; ++p) {
    const std::string pattern = random_pattern(rng, 0);
    const std::regex reference(pattern, std::regex::ECMAScript);
    std::shared_ptr<const RegexDfa> full, search;
    try {
      full = RegexDfa::compile(pattern, RegexDfa::Match::Full);
      search = RegexDfa::compile(pattern, RegexDfa::Match::Search);
    } catch (const ValueError& e) {  // a few random nestings need too many states
      ASSERT_NE(std::string(e.what()).find("automaton states"), std::string::npos) << e.what();
      ++too_large;
      continue;
    }
    for (int t = 0; t < 40; ++t) {
      std::string text;
      for (int n = static_cast<int>(rng() % 7); n > 0; --n) text += alphabet[rng() % 6];
      const int32_t f = run(*full, text), s = run(*search, text);
      const bool want_full = std::regex_match(text, reference);
      const bool want_search = std::regex_search(text, reference);
      ASSERT_EQ(f != RegexDfa::kDead && full->accepting(f), want_full)
          << "pattern '" << pattern << "' text '" << text << "'";
      ASSERT_EQ(s != RegexDfa::kDead && search->accepting(s), want_search)
          << "pattern '" << pattern << "' text '" << text << "' (search)";
      matched += want_full;
      searched += want_search;
    }
  }
  EXPECT_LT(too_large, 10);
  EXPECT_GT(matched, 500);  // both outcomes are well represented
  EXPECT_GT(searched, matched);
}

// Every state of dfa either matches or has a byte to go on with.
void expect_no_dead_end(const RegexDfa& dfa, const std::string& what) {
  for (int32_t s = 0; s < dfa.num_states(); ++s) {
    bool goes_on = dfa.accepting(s);
    for (int c = 0; c < 256 && !goes_on; ++c)
      goes_on = dfa.step(s, static_cast<uint8_t>(c)) != RegexDfa::kDead;
    ASSERT_TRUE(goes_on) << what << ": state " << s;
  }
}

size_t code_points(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

TEST(RegexDfa, AnIntersectionMatchesWhatBothMatch) {
  std::mt19937 rng(11);
  const char alphabet[] = {'a', 'b', 'c', '1', ' '};
  int both = 0;
  for (int p = 0; p < 150; ++p) {
    const std::string pa = random_pattern(rng, 1), pb = random_pattern(rng, 1);
    std::shared_ptr<const RegexDfa> a, b, ab;
    try {
      a = RegexDfa::compile(pa, RegexDfa::Match::Search);
      b = RegexDfa::compile(pb, RegexDfa::Match::Search);
      ab = RegexDfa::intersect(*a, *b);
    } catch (const ValueError& e) {  // too many states, or no text matches both
      const std::string what = e.what();
      ASSERT_TRUE(what.find("automaton states") != std::string::npos ||
                  what.find("[Regex] the intersection matches no text") != std::string::npos)
          << what;
      continue;
    }
    expect_no_dead_end(*ab, pa + " & " + pb);
    for (int t = 0; t < 40; ++t) {
      std::string text;
      for (int n = static_cast<int>(rng() % 7); n > 0; --n) text += alphabet[rng() % 5];
      const int32_t sa = run(*a, text), sb = run(*b, text), s = run(*ab, text);
      const bool want =
          sa != RegexDfa::kDead && a->accepting(sa) && sb != RegexDfa::kDead && b->accepting(sb);
      ASSERT_EQ(s != RegexDfa::kDead && ab->accepting(s), want)
          << "'" << pa << "' & '" << pb << "' text '" << text << "'";
      both += want;
    }
  }
  EXPECT_GT(both, 300);
  EXPECT_TESSERA_ERROR(RegexDfa::intersect(*RegexDfa::compile("a+", RegexDfa::Match::Full),
                                           *RegexDfa::compile("b+", RegexDfa::Match::Full)),
                       ValueError, "[Regex] the intersection matches no text");
}

TEST(RegexDfa, LengthBoundsCountCodePointsAndStrandNoText) {
  std::mt19937 rng(5);
  const std::vector<std::string> alphabet = {"a", "b", "1", " ", "\xc3\xa9"};
  int kept = 0;
  for (int p = 0; p < 150; ++p) {
    const std::string pattern = random_pattern(rng, 0);
    const int64_t lo = static_cast<int64_t>(rng() % 4);
    const int64_t hi = rng() % 3 == 0 ? -1 : lo + static_cast<int64_t>(rng() % 4);
    std::shared_ptr<const RegexDfa> dfa, bounded;
    try {
      dfa = RegexDfa::compile(pattern, RegexDfa::Match::Full);
      bounded = RegexDfa::with_length(*dfa, lo, hi);
    } catch (const ValueError& e) {
      ASSERT_TRUE(std::string(e.what()).find("automaton states") != std::string::npos ||
                  std::string(e.what()).find("matches no text") != std::string::npos)
          << e.what();
      continue;
    }
    expect_no_dead_end(*bounded, pattern);
    for (int t = 0; t < 40; ++t) {
      std::string text;
      for (int n = static_cast<int>(rng() % 7); n > 0; --n) text += alphabet[rng() % 5];
      const int32_t s = run(*dfa, text), b = run(*bounded, text);
      const auto chars = static_cast<int64_t>(code_points(text));
      const bool want =
          s != RegexDfa::kDead && dfa->accepting(s) && chars >= lo && (hi < 0 || chars <= hi);
      ASSERT_EQ(b != RegexDfa::kDead && bounded->accepting(b), want)
          << "'" << pattern << "' in [" << lo << ", " << hi << "] text '" << text << "'";
      kept += want;
    }
  }
  EXPECT_GT(kept, 200);
  // The bound is in the automaton: after "ab" at most 2 characters, nothing may follow.
  const auto ab = RegexDfa::with_length(*RegexDfa::compile("ab(cd)?", RegexDfa::Match::Full), 0, 3);
  EXPECT_TRUE(ab->final(run(*ab, "ab")));
  EXPECT_TESSERA_ERROR(
      RegexDfa::with_length(*RegexDfa::compile("abc", RegexDfa::Match::Full), 0, 2), ValueError,
      "[Regex] the pattern within 0 to 2 characters matches no text");
}

TEST(RegexDfa, EveryLiveStateCanStillReachAMatch) {
  // Only "ab" matches: after "a" the DFA must refuse everything but "b", and "x" at once.
  const auto dfa = RegexDfa::compile("ab|a[^\\s\\S]", RegexDfa::Match::Full);
  const int32_t a = dfa->step(dfa->start(), 'a');
  ASSERT_NE(a, RegexDfa::kDead);
  for (int c = 0; c < 256; ++c)
    EXPECT_EQ(dfa->step(a, static_cast<uint8_t>(c)) != RegexDfa::kDead, c == 'b') << c;
  EXPECT_EQ(dfa->step(dfa->start(), 'x'), RegexDfa::kDead);
}

TEST(RegexDfa, FinalStatesAreMatchesNothingCanExtend) {
  const auto dfa = RegexDfa::compile("(yes|no)!?", RegexDfa::Match::Full);
  EXPECT_FALSE(dfa->accepting(run(*dfa, "ye")));
  EXPECT_TRUE(dfa->accepting(run(*dfa, "yes")));
  EXPECT_FALSE(dfa->final(run(*dfa, "yes")));  // a '!' may follow
  EXPECT_TRUE(dfa->final(run(*dfa, "yes!")));
  EXPECT_FALSE(RegexDfa::compile("a+", RegexDfa::Match::Full)->final(1));
}

TEST(RegexDfa, ClassesAndDotSpanUtf8Characters) {
  EXPECT_TRUE(full_match("caf.", "caf\xc3\xa9"));                       // é: 2 bytes
  EXPECT_TRUE(full_match(".", "\xf0\x9f\x98\x80"));                     // U+1F600: 4 bytes
  EXPECT_TRUE(full_match("[^a]", "\xe2\x82\xac"));                      // €
  EXPECT_TRUE(full_match("[\xc3\xa0-\xc3\xbf]+", "\xc3\xa9\xc3\xa0"));  // [à-ÿ]
  EXPECT_FALSE(full_match("[\xc3\xa0-\xc3\xbf]", "\xc3\x9f"));          // ß is below à
  EXPECT_TRUE(full_match("\\u20ac\\x41",
                         "\xe2\x82\xac"
                         "A"));
  EXPECT_FALSE(full_match(".", "\n"));
  EXPECT_FALSE(full_match(".", "\xe2\x80\xa8"));   // U+2028, a line terminator
  EXPECT_TRUE(full_match("\\s", "\xe3\x80\x80"));  // U+3000, white space
  // Nothing but valid UTF-8 gets through: no lone continuation, overlong form or surrogate.
  const auto any = RegexDfa::compile("[\\s\\S]*", RegexDfa::Match::Full);
  for (const char* bad : {"\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff"})
    EXPECT_EQ(run(*any, bad), RegexDfa::kDead) << bad;
}

TEST(RegexDfa, AnchorsAndSearch) {
  EXPECT_TRUE(search_match("\\d{3}", "tel 5551"));
  EXPECT_FALSE(search_match("^\\d{3}", "tel 555"));
  EXPECT_TRUE(search_match("^\\d{3}", "555 tel"));
  EXPECT_FALSE(search_match("^\\d{3}$", "5555"));
  EXPECT_TRUE(search_match("^a|b$", "ax"));
  EXPECT_TRUE(search_match("^a|b$", "xb"));
  EXPECT_FALSE(search_match("^a|b$", "xa"));
  EXPECT_TRUE(full_match("^[a-z]+$", "abc"));
  EXPECT_TRUE(search_match("", "anything"));
  EXPECT_TRUE(full_match("(?P<year>\\d{4})-(?<month>\\d\\d)", "2026-11"));
  EXPECT_TRUE(full_match("a{,2}", "a{,2}"));  // not a quantifier: literal, as Python
  EXPECT_TRUE(full_match("[]a]+", "]a"));
  EXPECT_TRUE(full_match("[a\\-z]+", "-az"));
  EXPECT_TRUE(full_match("\\.\\*\\/", ".*/"));
}

TEST(RegexDfa, UnsupportedSyntaxIsAValueErrorNamingIt) {
  auto refuses = [](const char* pattern, const char* what) {
    EXPECT_TESSERA_ERROR(RegexDfa::compile(pattern, RegexDfa::Match::Full), ValueError, what);
  };
  refuses("a(?=b)", "lookahead is not supported");
  refuses("(?<=a)b", "lookbehind is not supported");
  refuses("(a)\\1", "backreferences are not supported");
  refuses("\\bword", "word boundaries are not supported");
  refuses("(?i)a", "inline flags");
  refuses("\\p{L}", "Unicode property escapes");
  refuses("a++", "possessive quantifiers");
  refuses("*a", "nothing to repeat");
  refuses("a**", "a quantifier must follow something it can repeat");
  refuses("(ab", "a '(' without its ')'");
  refuses("ab)", "unbalanced ')'");
  refuses("[ab", "a '[' without its ']'");
  refuses("[z-a]", "a class range out of order");
  refuses("a{3,2}", "maximum is below its minimum");
  refuses("a{1001}", "repeat counts above 1000");
  refuses("a^b", "'^' is supported only at the start");
  refuses("a$b", "'$' is supported only at the end");
  refuses("\\q", "unknown escape '\\q'");
  refuses("[^\\s\\S]", "matches no text");
  refuses("\xc3", "invalid UTF-8");
  refuses("(a|b)*a(a|b){14}", "needs more than 10000 automaton states");
  refuses("((a{1000}){1000}){10}", "too large once its repeats are expanded");
  EXPECT_TESSERA_ERROR(RegexDfa::compile("a(?=b)", RegexDfa::Match::Full), ValueError,
                       "at position 1 of 'a(?=b)'");
}

}  // namespace
}  // namespace tessera

// Regular expression text -> regex::Ast, by recursive descent over the pattern's code points.
#include "infer/pattern_reader.h"

namespace tessera::infer::regex {

namespace {

class Parser : PatternReader {
 public:
  Parser(std::string_view pattern, RegexDfa::Match match)
      : PatternReader(pattern, "Regex"), match_(match) {}

  Ast run() {
    ast_.root = alternation(0);
    if (pos_ < p_.size()) fail("unbalanced ')'");
    return std::move(ast_);
  }

 private:
  int32_t any_text() {
    return add({.kind = Node::Kind::Repeat, .children = {chars({{0, kMaxCodePoint}})}});
  }

  int32_t alternation(int depth) {
    std::vector<int32_t> branches{branch(depth)};
    while (eat('|')) branches.push_back(branch(depth));
    return alternatives_of(std::move(branches));
  }

  // A sequence up to '|', ')' or the end; at the top level, its ^ and $ anchors.
  int32_t branch(int depth) {
    const bool top = depth == 0;
    const bool begin = top && eat('^');
    bool end = false;
    std::vector<int32_t> items;
    while (!done() && peek() != '|' && peek() != ')') {
      if (top && peek() == '$') {
        ++pos_;
        if (!done() && peek() != '|') fail("'$' is supported only at the end of the pattern");
        end = true;
        break;
      }
      items.push_back(repeat(depth));
    }
    if (match_ == RegexDfa::Match::Search && top) {
      if (!begin) items.insert(items.begin(), any_text());
      if (!end) items.push_back(any_text());
    }
    return sequence_of(std::move(items));
  }

  int32_t repeat(int depth) {
    int32_t node = atom(depth);
    for (;;) {
      int32_t lo, hi;
      const size_t at = pos_;
      if (!quantifier(lo, hi)) return node;
      if (eat('+')) fail("possessive quantifiers are not supported");
      eat('?');  // lazy: the same texts match as a whole
      if (!done() && std::string_view("*+?{").find(peek()) != std::string_view::npos &&
          (peek() != '{' || counted_ahead())) {
        pos_ = at;
        fail("a quantifier must follow something it can repeat, not another quantifier");
      }
      node = add({.kind = Node::Kind::Repeat, .children = {node}, .min = lo, .max = hi});
    }
  }

  int32_t atom(int depth) {
    const char c = peek();
    if (c == '(') return group(depth);
    if (c == '[') return char_class();
    if (c == '*' || c == '+' || c == '?' || (c == '{' && counted_ahead()))
      fail("nothing to repeat");
    if (c == '^' || c == '$')
      fail(std::string("'") + c + "' is supported only at the start / end of the pattern");
    if (c == '.') {
      ++pos_;
      return chars(complement(kLineTerminator));
    }
    if (c == '\\') {
      ++pos_;
      Ranges r;
      if (!escape(r, /*in_class=*/false)) fail("a backslash at the end of the pattern");
      return chars(std::move(r));
    }
    const uint32_t cp = code_point();
    return chars({{cp, cp}});
  }

  int32_t group(int depth) {
    const size_t at = pos_;
    auto refuse = [&](const char* what) {
      pos_ = at;
      fail(what);
    };
    ++pos_;  // '('
    if (eat('?')) {
      if (eat(':')) {
      } else if (p_.substr(pos_, 2) == "<=" || p_.substr(pos_, 2) == "<!") {
        refuse("lookbehind is not supported");
      } else if (eat('P') || peek() == '<') {
        if (!eat('<')) refuse("unsupported (?P...) group syntax");
        while (!done() && peek() != '>') ++pos_;
        if (!eat('>')) refuse("an unterminated group name");
      } else if (peek() == '=' || peek() == '!') {
        refuse("lookahead is not supported");
      } else {
        refuse("inline flags and other (?...) groups are not supported");
      }
    }
    const int32_t inner = alternation(depth + 1);
    if (!eat(')')) fail("a '(' without its ')'");
    return inner;
  }

  RegexDfa::Match match_;
};

}  // namespace

Ast parse(std::string_view pattern, RegexDfa::Match match) { return Parser(pattern, match).run(); }

}  // namespace tessera::infer::regex

// GBNF text -> regex::Rules: each rule's body parsed as an expression over literals, classes and
// calls of other rules (cfg_grammar.h describes the syntax).
#include <map>

#include "infer/pattern_reader.h"

namespace tessera::infer::regex {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class GbnfParser : PatternReader {
 public:
  explicit GbnfParser(std::string_view text) : PatternReader(text, "Grammar") {}

  Rules run() {
    for (pos_ = after_blank(pos_); !done(); pos_ = after_blank(pos_)) {
      const size_t at = pos_;
      const int32_t rule = rule_index(name());
      if (rules_.roots[static_cast<size_t>(rule)] >= 0) {
        pos_ = at;
        fail("rule '" + rules_.names[static_cast<size_t>(rule)] + "' is defined twice");
      }
      pos_ = after_blank(pos_, /*newlines=*/false);
      if (p_.substr(pos_, 3) != "::=") fail("expected '::=' after a rule name");
      pos_ += 3;
      rules_.roots[static_cast<size_t>(rule)] = alternation(/*nested=*/false);
    }
    for (size_t r = 0; r < rules_.names.size(); ++r)
      if (rules_.roots[r] < 0) {
        pos_ = first_use_[r];
        fail("rule '" + rules_.names[r] + "' is used but not defined");
      }
    if (!index_.contains("root")) fail("a grammar needs a rule named 'root'");
    rules_.ast = std::move(ast_);
    return std::move(rules_);
  }

 private:
  // Past spaces, tabs and # comments from i, and line breaks too when newlines.
  size_t after_blank(size_t i, bool newlines = true) const {
    while (i < p_.size()) {
      const char c = p_[i];
      if (c == '#') {
        while (i < p_.size() && p_[i] != '\n') ++i;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++i;
      } else {
        break;
      }
    }
    return i;
  }

  // A rule definition starts at i: a name, then "::=".
  bool rule_start_at(size_t i) const {
    const size_t from = i;
    while (i < p_.size() && name_char(p_[i])) ++i;
    return i > from && p_.substr(after_blank(i, false), 3) == "::=";
  }

  std::string name() {
    const size_t from = pos_;
    while (!done() && name_char(peek())) ++pos_;
    if (pos_ == from) fail("expected a rule name");
    return std::string(p_.substr(from, pos_ - from));
  }

  int32_t rule_index(const std::string& name) {
    const auto [it, added] = index_.emplace(name, static_cast<int32_t>(rules_.names.size()));
    if (added) {
      rules_.names.push_back(name);
      rules_.roots.push_back(-1);
      first_use_.push_back(pos_ - name.size());
    }
    return it->second;
  }

  int32_t alternation(bool nested) {
    std::vector<int32_t> branches{sequence(nested)};
    while (eat('|')) branches.push_back(sequence(nested));
    return alternatives_of(std::move(branches));
  }

  // Items up to '|', ')', the next rule's definition or the end; line breaks may fall anywhere.
  int32_t sequence(bool nested) {
    std::vector<int32_t> items;
    for (;;) {
      const size_t next = after_blank(pos_);
      if (next < p_.size() && p_[next] == ')' && !nested) {
        pos_ = next;
        fail("unbalanced ')'");
      }
      if (next >= p_.size() || p_[next] == '|' || p_[next] == ')' || rule_start_at(next)) {
        if (next < p_.size() && (p_[next] == '|' || p_[next] == ')')) pos_ = next;
        break;
      }
      pos_ = next;
      items.push_back(repeat(nested));
    }
    return sequence_of(std::move(items));
  }

  int32_t repeat(bool nested) {
    int32_t node = atom();
    for (;;) {
      const size_t next = after_blank(pos_, nested);
      if (next >= p_.size()) return node;
      int32_t lo, hi;
      pos_ = next;
      if (!quantifier(lo, hi)) return node;
      node = add({.kind = Node::Kind::Repeat, .children = {node}, .min = lo, .max = hi});
    }
  }

  int32_t atom() {
    const char c = peek();
    if (c == '"' || c == '\'') return literal(c);
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return chars({{0, kMaxCodePoint}});
    }
    if (c == '(') {
      const size_t at = pos_++;
      const int32_t inner = alternation(/*nested=*/true);
      pos_ = after_blank(pos_);
      if (!eat(')')) {
        pos_ = at;
        fail("a '(' without its ')'");
      }
      return inner;
    }
    if (name_char(c)) {
      const std::string n = name();
      return add({.kind = Node::Kind::Call, .rule = rule_index(n)});
    }
    fail("expected a literal, a [class], '.', '(' or a rule name");
  }

  int32_t literal(char quote) {
    const size_t at = pos_++;
    std::vector<int32_t> items;
    for (;;) {
      if (done() || peek() == '\n') {
        pos_ = at;
        fail("a literal without its closing quote");
      }
      if (eat(quote)) break;
      Ranges r;
      if (eat('\\')) {
        if (!escape(r, /*in_class=*/false)) fail("a literal without its closing quote");
      } else {
        const uint32_t cp = code_point();
        r = {{cp, cp}};
      }
      items.push_back(chars(std::move(r)));
    }
    return sequence_of(std::move(items));
  }

  Rules rules_;
  std::map<std::string, int32_t> index_;
  std::vector<size_t> first_use_;
};

}  // namespace

Rules parse_gbnf(std::string_view text) { return GbnfParser(text).run(); }

}  // namespace tessera::infer::regex

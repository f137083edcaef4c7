#pragma once
// What the regex and grammar parsers share: reading a pattern's code points, escapes, character
// classes and counted repeats into regex::Ast nodes, and errors that name the position.
#include <string>
#include <string_view>
#include <vector>

#include "infer/regex_ast.h"

namespace tessera::infer::regex {

using Ranges = std::vector<CodeRange>;
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Sorted, merged ranges; and the code points not in normalized ranges.
Ranges normalized(Ranges r);
Ranges complement(const Ranges& r);
// ECMAScript's line terminators, which `.` does not match.
extern const Ranges kLineTerminator;

class PatternReader {
 protected:
  // who: the error prefix ("Regex", "Grammar").
  PatternReader(std::string_view text, const char* who) : p_(text), who_(who) {}

  [[noreturn]] void fail(const std::string& what) const;
  bool done() const { return pos_ >= p_.size(); }
  char peek() const { return done() ? '\0' : p_[pos_]; }
  bool eat(char c) {
    if (done() || peek() != c) return false;
    ++pos_;
    return true;
  }

  int32_t add(Node n) {
    ast_.nodes.push_back(std::move(n));
    return static_cast<int32_t>(ast_.nodes.size() - 1);
  }
  int32_t chars(Ranges r) { return add({.kind = Node::Kind::Chars, .ranges = normalized(r)}); }
  // One node for the texts of all items in turn (Empty for none), or of any of the branches.
  int32_t sequence_of(std::vector<int32_t> items) {
    if (items.size() == 1) return items[0];
    if (items.empty()) return add({});
    return add({.kind = Node::Kind::Concat, .children = std::move(items)});
  }
  int32_t alternatives_of(std::vector<int32_t> branches) {
    if (branches.size() == 1) return branches[0];
    return add({.kind = Node::Kind::Alt, .children = std::move(branches)});
  }

  // One code point of the text's UTF-8.
  uint32_t code_point();
  // *, +, ?, {n}, {n,} or {n,m} at pos_: consumed, its bounds (hi -1: unbounded) and true;
  // anything else is left (false).
  bool quantifier(int32_t& lo, int32_t& hi);
  // {n}, {n,} or {n,m} at pos_.
  bool counted(int32_t& lo, int32_t& hi);
  bool counted_ahead() const;
  // [...] at pos_.
  int32_t char_class();
  // After a backslash: the characters the escape stands for; false at the end of the text.
  bool escape(Ranges& out, bool in_class);

  std::string_view p_;
  const char* who_;
  size_t pos_ = 0;
  Ast ast_;

 private:
  int32_t number();
  bool class_item(Ranges& out);
};

}  // namespace tessera::infer::regex

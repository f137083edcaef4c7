#include "tessera/tokenizers/jinja_template.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tokenizers/jinja_expression.h"

namespace tessera::tokenizers {

using namespace jinja;

namespace {

struct Piece {
  enum Kind { Text, Expr, Stmt } kind;
  std::string text;
};

// Splits source into text, {{ expr }} and {% stmt %} pieces, applying "-" whitespace control
// and HF's trim_blocks (the newline after a block tag goes) and lstrip_blocks (spaces and tabs
// before a block tag on its line go).
// The first position at or after from where src continues with needle outside string literals
// and brackets, or npos: where a tag ends (an expression may print "}}" or build a dict), or a
// for statement's filter starts.
size_t find_top_level(const std::string& src, size_t from, std::string_view needle) {
  int depth = 0;
  char quote = 0;
  for (size_t i = from; i < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (depth == 0 && src.compare(i, needle.size(), needle) == 0) {
      return i;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

std::vector<Piece> split(const std::string& src) {
  std::vector<Piece> pieces;
  size_t i = 0;
  bool trim_next = false, newline_next = false;
  auto add_text = [&](std::string t) {
    if (newline_next && !t.empty() && t[0] == '\n') t.erase(0, 1);
    if (trim_next) t = strip(t, true, false);
    trim_next = newline_next = false;
    if (!t.empty()) pieces.push_back({Piece::Text, t});
  };
  while (i < src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string::npos && open + 1 < src.size() &&
           std::string("{%#").find(src[open + 1]) == std::string::npos)
      open = src.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= src.size()) {
      add_text(src.substr(i));
      break;
    }
    const char kind = src[open + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = kind == '#' ? src.find(close, open + 2)  // comments hold no literals
                                   : find_top_level(src, open + 2, close);
    if (end == std::string::npos) fail("expected '" + close + "' after: " + src.substr(open, 40));
    std::string text = src.substr(i, open - i);
    std::string inner = src.substr(open + 2, end - open - 2);
    const bool trim_before = !inner.empty() && inner.front() == '-';
    // "{%-%}": one "-" is the opening's ("{%- -%}" trims both sides).
    const bool trim_after = inner.size() > (trim_before ? 1u : 0u) && inner.back() == '-';
    if (trim_before) inner.erase(0, 1);
    if (trim_after) inner.pop_back();
    const bool block = kind != '{';
    if (trim_before) {
      text = strip(text, false, true);
    } else if (block) {  // lstrip_blocks: only spaces/tabs back to the line start
      size_t k = text.size();
      while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
      // A tag ends the text before it: only the source's start begins a line there.
      if ((k == 0 && i == 0) || (k > 0 && text[k - 1] == '\n')) text.erase(k);
    }
    add_text(text);
    if (kind == '{') pieces.push_back({Piece::Expr, strip(inner, true, true)});
    if (kind == '%') pieces.push_back({Piece::Stmt, strip(inner, true, true)});
    trim_next = trim_after;
    newline_next = block;
    i = end + 2;
  }
  return pieces;
}

std::string first_word(const std::string& s) { return s.substr(0, s.find_first_of(" \t\n")); }
std::string rest(const std::string& s) {
  const size_t p = s.find_first_of(" \t\n");
  return p == std::string::npos ? "" : strip(s.substr(p), true, true);
}

}  // namespace

// Loop iterations of the render under way on this thread (see kMaxIterations).
static thread_local int64_t iterations = 0;

struct JinjaTemplate::Node {
  enum Kind { Block, Text, Expr, If, For, Set } kind = Block;
  std::string text;  // Text: the text; Expr / Set: the expression; For: its filter ("" for none)
  std::string var;                 // For: the loop variable; Set: the name
  std::vector<std::string> conds;  // If: one per branch ("" for else); For: the iterable
  std::vector<std::unique_ptr<Node>> children;  // Block: its nodes; If / For: one Block per branch

  void render(Json& scope, std::string& out) const {
    switch (kind) {
      case Block:
        for (const auto& c : children) c->render(scope, out);
        break;
      case Text:
        out += text;
        break;
      case Expr:
        out += to_text(evaluate(text, scope));
        break;
      case Set: {
        Json value = evaluate(text, scope);
        if (const size_t dot = var.find('.'); dot != std::string::npos) {
          // {% set ns.name = ... %}: into a namespace() object.
          Json& target = scope[var.substr(0, dot)];
          if (!target.is_object()) fail("expected a namespace to set '" + var + "' in");
          target[var.substr(dot + 1)] = std::move(value);
        } else {
          scope[var] = std::move(value);
        }
        break;
      }
      case If:
        for (size_t b = 0; b < conds.size(); ++b)
          if (conds[b].empty() || truthy(evaluate(conds[b], scope))) {
            children[b]->render(scope, out);
            break;
          }
        break;
      case For: {
        // "for k, v in d.items()" unpacks each item into the names.
        std::vector<std::string> names;
        for (size_t start = 0; start <= var.size();) {
          const size_t comma = std::min(var.find(',', start), var.size());
          names.push_back(strip(var.substr(start, comma - start), true, true));
          start = comma + 1;
        }
        auto assign = [&](const Json& item) {
          if (names.size() == 1) {
            scope[names[0]] = item;
            return;
          }
          for (size_t k = 0; k < names.size(); ++k)
            scope[names[k]] = item.is_array() && k < item.size() ? item[k] : kUndefined;
        };
        names.push_back("loop");
        std::vector<Json> saved;
        for (const std::string& n : names)
          saved.push_back(scope.contains(n) ? scope[n] : kUndefined);
        names.pop_back();
        auto restore = [&] {
          for (size_t k = 0; k <= names.size(); ++k) {
            const std::string n = k < names.size() ? names[k] : "loop";
            if (saved[k].is_discarded())
              scope.erase(n);
            else
              scope[n] = saved[k];
          }
        };
        Json items = evaluate(conds[0], scope);
        if (items.is_object()) {  // a mapping iterates over its keys
          Json keys = Json::array();
          for (auto it = items.begin(); it != items.end(); ++it) keys.push_back(it.key());
          items = std::move(keys);
        }
        if (items.is_array() && !text.empty()) {
          // {% for m in messages if cond %}: the loop (and loop.*) sees the items that pass.
          Json kept = Json::array();
          for (const Json& item : items) {
            assign(item);
            if (truthy(evaluate(text, scope))) kept.push_back(item);
          }
          items = std::move(kept);
        }
        if (!items.is_array() || items.empty()) {
          restore();
          if (children.size() > 1) children[1]->render(scope, out);
          break;
        }
        const int64_t n = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < n; ++i) {
          if (++iterations > kMaxIterations || out.size() > kMaxText)
            fail("the template runs beyond 10 million loop iterations or 64 MiB of text");
          assign(items[i]);
          scope["loop"] = {{"index0", i},        {"index", i + 1}, {"first", i == 0},
                           {"last", i == n - 1}, {"length", n},    {"revindex0", n - 1 - i},
                           {"revindex", n - i}};
          children[0]->render(scope, out);
        }
        restore();
        break;
      }
    }
  }
};

namespace {

using Node = JinjaTemplate::Node;

// "for x in xs" / "set x = e" -> {"x", "xs" / "e"}.
std::pair<std::string, std::string> split_statement(const std::string& stmt,
                                                    const std::string& separator,
                                                    const std::string& form) {
  const std::string spec = rest(stmt);
  const size_t at = spec.find(separator);
  if (at == std::string::npos) fail("expected '" + form + "', got: " + stmt);
  return {strip(spec.substr(0, at), true, true), spec.substr(at + separator.size())};
}

// A for statement's iterable and filter: "xs if cond" -> {"xs", "cond"}. In a for statement a
// top-level `if` is always the filter (Jinja parses the iterable without conditionals).
std::pair<std::string, std::string> split_loop_filter(const std::string& iterable) {
  const size_t at = find_top_level(iterable, 0, " if ");
  if (at == std::string::npos) return {iterable, ""};
  return {iterable.substr(0, at), iterable.substr(at + 4)};
}

// Parses pieces from i into block until a statement whose first word is in ends; returns it.
std::string parse_block(const std::vector<Piece>& pieces, size_t& i, Node& block,
                        const std::vector<std::string>& ends) {
  while (i < pieces.size()) {
    const Piece& p = pieces[i++];
    auto node = std::make_unique<Node>();
    if (p.kind == Piece::Text) {
      node->kind = Node::Text;
      node->text = p.text;
    } else if (p.kind == Piece::Expr) {
      node->kind = Node::Expr;
      node->text = p.text;
    } else {
      const std::string word = first_word(p.text);
      if (std::find(ends.begin(), ends.end(), word) != ends.end()) return p.text;
      if (word == "if") {
        node->kind = Node::If;
        std::string cond = rest(p.text);
        for (;;) {
          node->conds.push_back(cond);
          auto body = std::make_unique<Node>();
          const std::string end = parse_block(pieces, i, *body, {"elif", "else", "endif"});
          node->children.push_back(std::move(body));
          const std::string w = first_word(end);
          if (w == "endif") break;
          if (w == "else") {
            cond = "";
            node->conds.push_back(cond);
            auto last = std::make_unique<Node>();
            if (first_word(parse_block(pieces, i, *last, {"endif"})) != "endif")
              fail("expected {% endif %}");
            node->children.push_back(std::move(last));
            break;
          }
          if (w != "elif") fail("expected {% endif %}");
          cond = rest(end);
        }
      } else if (word == "for") {
        node->kind = Node::For;
        std::string iterable;
        std::tie(node->var, iterable) = split_statement(p.text, " in ", "for x in ...");
        std::string filter;
        std::tie(iterable, filter) = split_loop_filter(iterable);
        node->conds.push_back(iterable);
        node->text = filter;
        auto body = std::make_unique<Node>();
        std::string end = parse_block(pieces, i, *body, {"else", "endfor"});
        node->children.push_back(std::move(body));
        if (first_word(end) == "else") {
          auto empty = std::make_unique<Node>();
          end = parse_block(pieces, i, *empty, {"endfor"});
          node->children.push_back(std::move(empty));
        }
        if (first_word(end) != "endfor") fail("expected {% endfor %}");
      } else if (word == "set") {
        node->kind = Node::Set;
        std::tie(node->var, node->text) = split_statement(p.text, "=", "set name = ...");
      } else {
        fail("unsupported statement '{% " + p.text + " %}'");
      }
    }
    // Lexing now reports malformed expressions at load time, not at the first request (a text
    // node's text is literal: "a; b?" is no expression).
    if (node->kind != Node::Text) lex(node->text);
    for (const std::string& c : node->conds) lex(c);
    block.children.push_back(std::move(node));
  }
  if (!ends.empty()) fail("expected {% " + ends.back() + " %} before the end of the template");
  return "";
}

}  // namespace

JinjaTemplate::JinjaTemplate(const std::string& source) : root_(std::make_unique<Node>()) {
  const std::vector<Piece> pieces = split(source);
  size_t i = 0;
  parse_block(pieces, i, *root_, {});
}

JinjaTemplate::~JinjaTemplate() = default;
JinjaTemplate::JinjaTemplate(JinjaTemplate&&) noexcept = default;
JinjaTemplate& JinjaTemplate::operator=(JinjaTemplate&&) noexcept = default;

std::string JinjaTemplate::render(const Json& variables) const {
  TESSERA_CHECK(variables.is_object(), ValueError, "[jinja] expected an object of variables");
  Json scope = variables;
  std::string out;
  iterations = 0;
  root_->render(scope, out);
  if (out.size() > kMaxText) fail("the template renders beyond 64 MiB of text");
  return out;
}

}  // namespace tessera::tokenizers

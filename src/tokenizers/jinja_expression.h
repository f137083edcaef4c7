#pragma once
// Jinja expressions for JinjaTemplate (not public API): the lexer, the evaluator and the value
// rules (truthiness, text) that jinja_template.cpp's statements use too.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::tokenizers::jinja {

using Json = nlohmann::json;

// The value of a missing name, key or index: falsy, renders as "".
inline const Json kUndefined = Json(Json::value_t::discarded);

// The longest string a template may build or render (bytes); more is a ValueError, not an
// allocation failure.
inline constexpr size_t kMaxText = size_t{64} << 20;
// Loop iterations one render may run.
inline constexpr int64_t kMaxIterations = 10'000'000;

// ValueError "[jinja] " + what.
[[noreturn]] void fail(const std::string& what);
// Python's truthiness; undefined and none are false.
bool truthy(const Json& v);
// v as it renders: strings as they are, None / True / False, undefined as "", the rest as JSON.
std::string to_text(const Json& v);
// s without its leading (left) and/or trailing (right) whitespace.
std::string strip(const std::string& s, bool left, bool right);

struct Tok {
  enum Kind { Name, Str, Num, Op, End } kind;
  std::string text;
  Json num;
};

// src's tokens, ending with an End token; ValueError for an unclosed string or an unexpected
// character.
std::vector<Tok> lex(const std::string& src);

// The value of the expression src, names looked up in scope (an object).
Json evaluate(const std::string& src, const Json& scope);

}  // namespace tessera::tokenizers::jinja

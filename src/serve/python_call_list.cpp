// A recursive-descent reader of Python literals, enough for the calls models write in the
// pythonic tool-call format; anything else (names, operators, positional arguments) is refused.
#include "serve/python_call_list.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizers/utf8.h"

namespace tessera::serve::detail {

namespace {

using OrderedJson = nlohmann::ordered_json;

// Nesting deeper than this is refused (a model writing "[[[[..." must not exhaust the stack).
constexpr int kMaxDepth = 64;

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const tessera::detail::Utf8Char c = tessera::detail::next_utf8(s, i);
    if (c.cp == tessera::detail::kInvalidCodepoint) return false;
    i += static_cast<size_t>(c.len);
  }
  return true;
}

bool is_quote(char c) { return c == '\'' || c == '"'; }

bool is_identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  std::optional<std::vector<ParsedToolCall>> call_list() {
    std::vector<ParsedToolCall> calls;
    if (!eat('[')) return std::nullopt;
    while (!eat(']')) {
      std::optional<ParsedToolCall> call = this->call();
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
      if (!eat(',') && !peek(']')) return std::nullopt;
    }
    skip_space();
    if (i_ != s_.size()) return std::nullopt;
    return calls;
  }

 private:
  std::optional<ParsedToolCall> call() {
    std::string name = identifier();
    if (name.empty()) return std::nullopt;
    while (eat('.')) {  // a dotted name (module.function) is the function's name as written
      const std::string part = identifier();
      if (part.empty()) return std::nullopt;
      name += "." + part;
    }
    if (!eat('(')) return std::nullopt;
    OrderedJson args = OrderedJson::object();
    while (!eat(')')) {
      const std::string key = identifier();
      if (key.empty() || !eat('=') || args.contains(key)) return std::nullopt;
      std::optional<OrderedJson> v = value(0);
      if (!v) return std::nullopt;
      args[key] = std::move(*v);
      if (!eat(',') && !peek(')')) return std::nullopt;
    }
    return ParsedToolCall{std::move(name), args.dump()};
  }

  std::optional<OrderedJson> value(int depth) {
    if (depth > kMaxDepth) return std::nullopt;
    skip_space();
    if (i_ == s_.size()) return std::nullopt;
    const char c = s_[i_];
    if (is_quote(c)) return string();
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')', depth);
    if (c == '{') return dict(depth);
    if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c)))
      return number();
    const std::string word = identifier();
    if (word == "True") return OrderedJson(true);
    if (word == "False") return OrderedJson(false);
    if (word == "None") return OrderedJson(nullptr);
    return std::nullopt;
  }

  std::optional<OrderedJson> sequence(char close, int depth) {
    ++i_;
    OrderedJson out = OrderedJson::array();
    while (!eat(close)) {
      std::optional<OrderedJson> v = value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      if (!eat(',') && !peek(close)) return std::nullopt;
    }
    return out;
  }

  std::optional<OrderedJson> dict(int depth) {
    ++i_;
    OrderedJson out = OrderedJson::object();
    while (!eat('}')) {
      std::optional<OrderedJson> key = value(depth + 1);
      if (!key || !key->is_string() || !eat(':')) return std::nullopt;
      std::optional<OrderedJson> v = value(depth + 1);
      if (!v) return std::nullopt;
      out[key->get<std::string>()] = std::move(*v);
      if (!eat(',') && !peek('}')) return std::nullopt;
    }
    return out;
  }

  // '...' or "...", or their triple-quoted forms, with Python's common escapes.
  std::optional<OrderedJson> string() {
    const char q = s_[i_];
    const bool triple = s_.substr(i_, 3) == std::string(3, q);
    const std::string_view close = triple ? s_.substr(i_, 3) : s_.substr(i_, 1);
    i_ += close.size();
    std::string out;
    while (i_ < s_.size() && s_.substr(i_, close.size()) != close) {
      const char c = s_[i_++];
      if (c == '\n' && !triple) return std::nullopt;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ == s_.size()) return std::nullopt;
      const char e = s_[i_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i_ + digits > s_.size()) return std::nullopt;
          uint32_t cp = 0;
          for (size_t k = 0; k < digits; ++k) {
            const char h = s_[i_++];
            if (!std::isxdigit(static_cast<unsigned char>(h))) return std::nullopt;
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : std::tolower(h) - 'a' + 10);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
          tessera::detail::append_utf8(out, cp);
          break;
        }
        default:  // \\, \', \" and unknown escapes, which Python keeps with their backslash
          if (e != '\\' && !is_quote(e)) out += '\\';
          out += e;
      }
    }
    if (i_ == s_.size()) return std::nullopt;
    i_ += close.size();
    if (!valid_utf8(out)) return std::nullopt;
    return OrderedJson(std::move(out));
  }

  std::optional<OrderedJson> number() {
    const size_t begin = i_;
    if (s_[i_] == '-' || s_[i_] == '+') ++i_;
    while (i_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' || s_[i_] == '_' ||
            ((s_[i_] == '-' || s_[i_] == '+') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E'))))
      ++i_;
    // JSON's number syntax is Python's without '_' separators, '+' signs and bare dots ("1.",
    // ".5"), which get their zero.
    const std::string_view text = s_.substr(begin, i_ - begin);
    std::string json;
    for (size_t k = 0; k < text.size(); ++k) {
      const char c = text[k];
      if (c == '_' || (c == '+' && k == 0)) continue;
      const auto digit = [](char d) { return std::isdigit(static_cast<unsigned char>(d)) != 0; };
      if (c == '.' && (json.empty() || !digit(json.back()))) json += '0';
      json += c;
      if (c == '.' && (k + 1 == text.size() || !digit(text[k + 1]))) json += '0';
    }
    const OrderedJson v = OrderedJson::parse(json, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded() || !v.is_number()) return std::nullopt;
    return v;
  }

  std::string identifier() {
    skip_space();
    if (i_ == s_.size() || !is_identifier_start(s_[i_])) return {};
    const size_t begin = i_;
    while (i_ < s_.size() && is_identifier_char(s_[i_])) ++i_;
    return std::string(s_.substr(begin, i_ - begin));
  }

  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool peek(char c) {
    skip_space();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++i_;
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

size_t python_list_end(std::string_view text, size_t begin) {
  int depth = 0;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (is_quote(c)) {
      const bool triple = text.substr(i, 3) == std::string(3, c);
      const std::string_view close = text.substr(i, triple ? 3 : 1);
      for (i += close.size(); i < text.size() && text.substr(i, close.size()) != close; ++i)
        if (text[i] == '\\') ++i;
      if (i >= text.size()) return std::string_view::npos;
      i += close.size() - 1;
    } else if (c == '[' || c == '(' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == ')' || c == '}') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<std::vector<ParsedToolCall>> parse_python_call_list(std::string_view list) {
  return Reader(list).call_list();
}

}  // namespace tessera::serve::detail

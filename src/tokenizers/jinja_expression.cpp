// Jinja expressions: lexing, evaluating (operators, tests, filters, methods) and the value rules
// of jinja_expression.h.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <optional>
#include <vector>

#include "tessera/core/error.h"
#include "tokenizers/jinja_expression.h"
#include "tokenizers/utf8.h"

namespace tessera::tokenizers::jinja {

[[noreturn]] void fail(const std::string& what) { throw ValueError("[jinja] " + what); }

// Invalid UTF-8 in a value dumps as U+FFFD rather than throwing nlohmann's type_error.
constexpr auto kReplace = Json::error_handler_t::replace;

bool truthy(const Json& v) {
  if (v.is_discarded() || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get<std::string>().empty();
  return !v.empty();
}

std::string to_text(const Json& v) {
  if (v.is_discarded()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump(-1, ' ', false, kReplace);
}

std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  if (right)
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<Tok> lex(const std::string& src) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      out.push_back({Tok::Name, src.substr(i, j - i), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '.'))
        ++j;
      const std::string n = src.substr(i, j - i);
      Json value;
      if (n.find('.') == std::string::npos) {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
        if (ec != std::errc()) fail("integer literal " + n + " out of the int64 range in: " + src);
        value = v;
      } else {
        double v = 0.0;
        const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
        if (ec != std::errc() || end != n.data() + n.size())
          fail("malformed number " + n + " in: " + src);
        value = v;
      }
      out.push_back({Tok::Num, n, value});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t j = i + 1;
      for (; j < src.size() && src[j] != c; ++j) {
        if (src[j] == '\\' && j + 1 < src.size()) {
          const char e = src[++j];
          s += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          s += src[j];
        }
      }
      if (j >= src.size()) fail("expected a closing quote in: " + src);
      out.push_back({Tok::Str, s, {}});
      i = j + 1;
    } else {
      static const char* kTwo[] = {"==", "!=", "<=", ">=", "//"};
      std::string op(1, c);
      for (const char* t : kTwo)
        if (src.compare(i, 2, t) == 0) op = t;
      if (std::string("+-*/%~=!<>()[]{}.,:|").find(c) == std::string::npos)
        fail(std::string("unexpected character '") + c + "' in: " + src);
      out.push_back({Tok::Op, op, {}});
      i += op.size();
    }
  }
  out.push_back({Tok::End, "", {}});
  return out;
}

namespace {

// Python's json.dumps as Hugging Face's tojson calls it (ensure_ascii off): ", " and ": "
// between items, or with indent n, items on their own lines indented n per level (then "," and
// ": "). Undefined dumps as null.
void dump_python(const Json& v, int64_t indent, int64_t depth, std::string& out) {
  if (!v.is_array() && !v.is_object()) {
    out += v.is_discarded() ? "null" : v.dump(-1, ' ', false, kReplace);
    return;
  }
  if (v.empty()) {
    out += v.is_array() ? "[]" : "{}";
    return;
  }
  const std::string pad = indent > 0 ? "\n" + std::string(indent * (depth + 1), ' ') : "";
  out += v.is_array() ? '[' : '{';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += indent > 0 ? "," : ", ";
    first = false;
    out += pad;
    if (v.is_object()) out += Json(it.key()).dump(-1, ' ', false, kReplace) + ": ";
    dump_python(*it, indent, depth + 1, out);
  }
  if (indent > 0) out += "\n" + std::string(indent * depth, ' ');
  out += v.is_array() ? ']' : '}';
}

// Jinja's ==: undefined equals only undefined (nlohmann's discarded compares unequal to all,
// itself included, and != too).
bool equal(const Json& a, const Json& b) {
  if (a.is_discarded() || b.is_discarded()) return a.is_discarded() && b.is_discarded();
  return a == b;
}

// Recursive descent that evaluates as it parses (templates are tiny). An operand whose value may
// go unused (the right side of and/or, either side of a ternary) is evaluated tentatively: its
// evaluation errors (raise_exception, 'a' + 1) count only if its value is taken, as in Jinja
// where it is not evaluated at all. Syntax errors count always.
class Eval {
 public:
  Eval(const std::string& src, const Json& scope) : src_(src), toks_(lex(src)), scope_(scope) {}

  Json run() {
    Json v = ternary();
    if (peek().kind != Tok::End) fail("unexpected '" + peek().text + "' in: " + src_);
    return v;
  }

 private:
  const Tok& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool is(const char* text, size_t k = 0) const {
    return peek(k).kind != Tok::Str && peek(k).text == text;
  }
  bool accept(const char* text) {
    if (!is(text)) return false;
    ++pos_;
    return true;
  }
  void expect(const char* text) {
    if (!accept(text)) fail(std::string("expected '") + text + "' in: " + src_);
  }
  std::string name() {
    if (peek().kind != Tok::Name) fail("expected a name in: " + src_);
    return toks_[pos_++].text;
  }

  // Throws what, or records it (the first one) while evaluating tentatively; undefined then.
  Json value_error(const std::string& what) {
    if (tentative_ == 0) fail(what);
    if (!error_) error_ = what;
    return kUndefined;
  }
  // operand() evaluated tentatively; error receives its first evaluation error, if any.
  template <class Operand>
  Json tentatively(Operand operand, std::optional<std::string>& error) {
    std::optional<std::string> outer = std::move(error_);
    error_.reset();
    ++tentative_;
    Json v = operand();
    --tentative_;
    error = std::move(error_);
    error_ = std::move(outer);
    return v;
  }
  // A tentative operand's value, taken: its error now counts.
  Json taken(Json v, const std::optional<std::string>& error) {
    return error ? value_error(*error) : v;
  }

  Json ternary() {
    std::optional<std::string> v_error, other_error;
    Json v = tentatively([&] { return or_expr(); }, v_error);
    if (!accept("if")) return taken(std::move(v), v_error);
    const bool cond = truthy(or_expr());
    Json other = kUndefined;
    if (accept("else")) other = tentatively([&] { return ternary(); }, other_error);
    return cond ? taken(std::move(v), v_error) : taken(std::move(other), other_error);
  }
  Json or_expr() { return logical(true); }
  // a or b / a and b (or binds looser): Python's value rules, the operand that decided; the
  // right one is not needed once the left decided.
  Json logical(bool is_or) {
    auto operand = [&] { return is_or ? logical(false) : not_expr(); };
    Json v = operand();
    while (accept(is_or ? "or" : "and")) {
      std::optional<std::string> error;
      Json r = tentatively(operand, error);
      if (truthy(v) != is_or) v = taken(std::move(r), error);
    }
    return v;
  }
  Json not_expr() {
    if (accept("not")) return !truthy(not_expr());
    return compare();
  }
  static bool contains(const Json& hay, const Json& needle) {
    if (hay.is_string() && needle.is_string())
      return hay.get<std::string>().find(needle.get<std::string>()) != std::string::npos;
    if (hay.is_array()) return std::find(hay.begin(), hay.end(), needle) != hay.end();
    if (hay.is_object() && needle.is_string()) return hay.contains(needle.get<std::string>());
    return false;
  }
  Json compare() {
    Json v = concat();
    for (;;) {
      if (accept("is")) {
        const bool negate = accept("not");
        const std::string name_of_test = name();
        const Args a = accept("(") ? args() : Args{};
        v = negate != test(v, name_of_test, a.pos);
      } else if (is("not") && is("in", 1)) {
        pos_ += 2;
        v = !contains(concat(), v);
      } else if (accept("in")) {
        v = contains(concat(), v);
      } else {
        static const char* kOps[] = {"==", "!=", "<=", ">=", "<", ">"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (is(o)) op = o;
        if (!op) return v;
        ++pos_;
        const Json r = concat();
        const std::string o = op;
        if (o == "==")
          v = equal(v, r);
        else if (o == "!=")
          v = !equal(v, r);
        else if (o == "<")
          v = v < r;
        else if (o == ">")
          v = v > r;
        else if (o == "<=")
          v = v <= r;
        else
          v = v >= r;
      }
    }
  }
  // a + b, or an error past kMaxText bytes (a template doubling a string in a loop).
  Json text_sum(const std::string& a, const std::string& b) {
    if (a.size() + b.size() > kMaxText) return value_error("a string beyond 64 MiB in: " + src_);
    return a + b;
  }
  Json concat() {
    Json v = additive();
    while (accept("~")) v = text_sum(to_text(v), to_text(additive()));
    return v;
  }
  Json additive() {
    Json v = multiplicative();
    for (;;) {
      if (accept("+")) {
        const Json r = multiplicative();
        if (v.is_string() && r.is_string()) {
          v = text_sum(v.get<std::string>(), r.get<std::string>());
        } else if (v.is_number() && r.is_number()) {
          v = arith(v, r, '+');
        } else if (v.is_array() && r.is_array()) {
          v.insert(v.end(), r.begin(), r.end());
        } else {
          v = value_error("cannot add " + std::string(v.type_name()) + " and " + r.type_name() +
                          " in: " + src_);
        }
      } else if (accept("-")) {
        v = arith(v, multiplicative(), '-');
      } else {
        return v;
      }
    }
  }
  Json arith(const Json& a, const Json& b, char op) {
    if (!a.is_number() || !b.is_number())
      return value_error(std::string("expected numbers around '") + op + "' in: " + src_);
    if (a.is_number_integer() && b.is_number_integer() && op != '/') {
      const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
      if ((op == '%' || op == 'd') && y == 0) return value_error("division by zero in: " + src_);
      int64_t r = 0;
      bool overflow = false;
      if (op == '+') overflow = __builtin_add_overflow(x, y, &r);
      if (op == '-') overflow = __builtin_sub_overflow(x, y, &r);
      if (op == '*') overflow = __builtin_mul_overflow(x, y, &r);
      if (op == '%' || op == 'd') {
        // Python's floor rules: the remainder takes the divisor's sign. INT64_MIN % -1 traps.
        const int64_t rem = y == -1 ? 0 : x % y;
        const bool adjust = rem != 0 && (rem < 0) != (y < 0);
        if (op == '%') r = adjust ? rem + y : rem;  // opposite signs: no overflow
        if (op == 'd') {
          overflow = y == -1 && x == INT64_MIN;
          r = y == -1 ? (overflow ? 0 : -x) : x / y - adjust;
        }
      }
      if (overflow) return value_error("integer overflow in: " + src_);
      return r;
    }
    const double x = a.get<double>(), y = b.get<double>();
    if (op == '+') return x + y;
    if (op == '-') return x - y;
    if (op == '*') return x * y;
    if (op == '%') return std::fmod(x, y);
    if (op == 'd') return std::floor(x / y);
    return x / y;
  }
  Json multiplicative() {
    Json v = unary();
    for (;;) {
      if (accept("*"))
        v = arith(v, unary(), '*');
      else if (accept("//"))
        v = arith(v, unary(), 'd');
      else if (accept("/"))
        v = arith(v, unary(), '/');
      else if (accept("%"))
        v = arith(v, unary(), '%');
      else
        return v;
    }
  }
  Json unary() {
    if (accept("-")) return arith(Json(0), unary(), '-');
    return postfix();
  }
  // A call's arguments after its "(": positional ones, then name=value ones.
  struct Args {
    std::vector<Json> pos;
    Json kw = Json::object();
    Json at(size_t i, const char* keyword, Json fallback = kUndefined) const {
      if (kw.contains(keyword)) return kw[keyword];
      return i < pos.size() ? pos[i] : fallback;
    }
  };
  Args args() {
    Args a;
    if (accept(")")) return a;
    do {
      if (peek().kind == Tok::Name && peek(1).kind == Tok::Op && peek(1).text == "=") {
        const std::string key = name();
        ++pos_;
        a.kw[key] = ternary();
      } else {
        a.pos.push_back(ternary());
      }
    } while (accept(","));
    expect(")");
    return a;
  }
  // Jinja's tests (`x is name(args)`, select / reject), on value v.
  bool test(const Json& v, const std::string& t, const std::vector<Json>& a) {
    const Json arg = a.empty() ? kUndefined : a[0];
    if (t == "defined") return !v.is_discarded();
    if (t == "undefined") return v.is_discarded();
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer();
    if (t == "float") return v.is_number_float();
    if (t == "boolean") return v.is_boolean();
    if (t == "true") return v.is_boolean() && v.get<bool>();
    if (t == "false") return v.is_boolean() && !v.get<bool>();
    if (t == "mapping") return v.is_object();
    if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (t == "equalto" || t == "eq" || t == "sameas") return equal(v, arg);
    if (t == "ne") return !equal(v, arg);
    if (t == "odd" || t == "even") {
      if (!v.is_number_integer()) return false;
      return (v.get<int64_t>() % 2 != 0) == (t == "odd");
    }
    if (t == "in") return contains(arg, v);
    fail("unknown test '" + t + "' in: " + src_);
  }
  static Json index(const Json& v, const Json& key) {
    if (v.is_object() && key.is_string()) {
      auto it = v.find(key.get<std::string>());
      return it == v.end() ? kUndefined : *it;
    }
    if ((v.is_array() || v.is_string()) && key.is_number_integer()) {
      const int64_t n = v.is_array() ? static_cast<int64_t>(v.size())
                                     : static_cast<int64_t>(v.get<std::string>().size());
      int64_t i = key.get<int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return kUndefined;
      return v.is_array() ? v[i] : Json(std::string(1, v.get<std::string>()[i]));
    }
    return kUndefined;
  }
  // Python's v[lo:hi:step] (bytes for strings).
  Json slice(const Json& v, const Json& lo, const Json& hi, const Json& step_value) {
    const int64_t n =
        v.is_array() ? static_cast<int64_t>(v.size()) : static_cast<int64_t>(to_text(v).size());
    int64_t step = step_value.is_number_integer() ? step_value.get<int64_t>() : 1;
    if (step == 0) return value_error("slice step cannot be zero in: " + src_);
    step = std::clamp<int64_t>(step, -n - 1, n + 1);  // a longer stride takes one item anyway
    // Bounds clamp to [0, n] going forwards and to [-1, n - 1] going backwards.
    auto bound = [&](const Json& b, int64_t def) {
      if (!b.is_number_integer()) return def;
      int64_t i = b.get<int64_t>();
      if (i < 0) i += n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t a = bound(lo, step > 0 ? 0 : n - 1), b = bound(hi, step > 0 ? n : -1);
    const std::string text = v.is_array() ? std::string() : to_text(v);
    Json out = v.is_array() ? Json::array() : Json(std::string());
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
      if (v.is_array())
        out.push_back(v[i]);
      else
        out.get_ref<std::string&>() += text[i];
    }
    return out;
  }
  // s without the characters of chars (whitespace when undefined) at its left / right end.
  static std::string strip_chars(const std::string& s, const Json& chars, bool left, bool right) {
    if (!chars.is_string()) return strip(s, left, right);
    const std::string set = chars.get<std::string>();
    size_t b = 0, e = s.size();
    if (left)
      while (b < e && set.find(s[b]) != std::string::npos) ++b;
    if (right)
      while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
  }
  static Json split_text(const std::string& s, const Json& sep) {
    Json parts = Json::array();
    if (!sep.is_string() || sep.get<std::string>().empty()) {  // runs of whitespace
      std::string word;
      for (const char c : s + " ") {
        if (!std::isspace(static_cast<unsigned char>(c))) {
          word += c;
        } else if (!word.empty()) {
          parts.push_back(word);
          word.clear();
        }
      }
      return parts;
    }
    const std::string d = sep.get<std::string>();
    size_t start = 0;
    for (size_t at = s.find(d); at != std::string::npos; at = s.find(d, start)) {
      parts.push_back(s.substr(start, at - start));
      start = at + d.size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  static std::string capitalize(const std::string& s, bool every_word) {
    std::string r = s;
    bool start = true;
    for (char& c : r) {
      const auto u = static_cast<unsigned char>(c);
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = every_word ? !std::isalpha(static_cast<unsigned char>(c)) : false;
    }
    return r;
  }
  static Json items(const Json& v) {
    Json pairs = Json::array();
    for (auto it = v.begin(); it != v.end(); ++it) pairs.push_back(Json::array({it.key(), *it}));
    return pairs;
  }

  Json method(const Json& v, const std::string& m, const Args& call) {
    const std::vector<Json>& a = call.pos;
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      const Json first = a.empty() ? kUndefined : a[0];
      if (m == "strip") return strip_chars(s, first, true, true);
      if (m == "lstrip") return strip_chars(s, first, true, false);
      if (m == "rstrip") return strip_chars(s, first, false, true);
      if (m == "split") return split_text(s, first);
      if (m == "replace" && a.size() == 2 && a[0].is_string() && a[1].is_string()) {
        std::string r =
            tessera::detail::replace_all(s, a[0].get<std::string>(), a[1].get<std::string>());
        if (r.size() > kMaxText) return value_error("a string beyond 64 MiB in: " + src_);
        return r;
      }
      if (m == "title" || m == "capitalize") return capitalize(s, m == "title");
      if (m == "join" && !a.empty() && a[0].is_array()) return join(a[0], s);
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r) {
          const auto u = static_cast<unsigned char>(c);  // negative chars are UB for toupper
          c = static_cast<char>(m == "upper" ? std::toupper(u) : std::tolower(u));
        }
        return r;
      }
      if ((m == "startswith" || m == "endswith") && a.size() == 1 && a[0].is_string()) {
        const std::string p = a[0].get<std::string>();
        if (p.size() > s.size()) return false;
        return m == "startswith" ? s.compare(0, p.size(), p) == 0
                                 : s.compare(s.size() - p.size(), p.size(), p) == 0;
      }
    }
    if (v.is_object() && m == "get" && !a.empty()) {
      const Json r = index(v, a[0]);
      return r.is_discarded() ? (a.size() > 1 ? a[1] : Json(nullptr)) : r;
    }
    if (v.is_object() && m == "items") return items(v);
    if (v.is_object() && (m == "keys" || m == "values")) {
      Json out = Json::array();
      for (auto it = v.begin(); it != v.end(); ++it)
        out.push_back(m == "keys" ? Json(it.key()) : *it);
      return out;
    }
    return value_error("unsupported method '" + m + "' in: " + src_);
  }
  static std::string join(const Json& items, const std::string& separator) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + to_text(items[i]);
    return out;
  }
  // The items of v that pass (select / selectattr) or fail (reject / rejectattr) a test, of the
  // item or of its attribute a[0]; no test name: truthiness.
  Json select(const Json& v, const Args& call, bool by_attribute, bool keep) {
    Json out = Json::array();
    if (!v.is_array()) return out;
    const std::vector<Json>& a = call.pos;
    const size_t t = by_attribute ? 1 : 0;  // where the test name sits
    for (const Json& item : v) {
      const Json x = by_attribute && !a.empty() ? index(item, a[0]) : item;
      const bool pass =
          a.size() > t && a[t].is_string()
              ? test(x, a[t].get<std::string>(),
                     std::vector<Json>(a.begin() + static_cast<int64_t>(t) + 1, a.end()))
              : truthy(x);
      if (pass == keep) out.push_back(item);
    }
    return out;
  }
  Json filter(const Json& v, const std::string& f, const Args& a) {
    if (f == "trim") return strip(to_text(v), true, true);
    if (f == "length" || f == "count")
      return static_cast<int64_t>(v.is_string() ? v.get<std::string>().size() : v.size());
    if (f == "upper" || f == "lower" || f == "capitalize" || f == "title")
      return method(Json(to_text(v)), f, {});
    if (f == "string") return to_text(v);
    if (f == "safe") return v;
    if (f == "tojson") {
      const Json indent = a.at(0, "indent");
      const int64_t spaces = indent.is_number_integer() ? indent.get<int64_t>() : 0;
      if (spaces > 64) return value_error("tojson indent above 64 in: " + src_);
      std::string out;
      dump_python(v, spaces, 0, out);
      return out;
    }
    if (f == "list")
      return v.is_object() ? method(v, "keys", {}) : v.is_array() ? v : split_chars(v);
    if (f == "items") return v.is_object() ? items(v) : Json::array();
    if (f == "first" || f == "last") {
      if (!(v.is_array() || v.is_string()) || v.empty() || to_text(v).empty()) return kUndefined;
      return index(v, f == "first" ? Json(0) : Json(-1));
    }
    if (f == "reverse") return slice(v, kUndefined, kUndefined, Json(-1));
    if (f == "join") {
      if (!v.is_array() && !v.is_string()) return value_error("join expects a list in: " + src_);
      return join(v.is_string() ? split_chars(v) : v, to_text(a.at(0, "d", "")));
    }
    if (f == "default" || f == "d") {
      const bool boolean = truthy(a.at(1, "boolean", false));
      return (boolean ? !truthy(v) : v.is_discarded()) ? a.at(0, "default_value", "") : v;
    }
    if (f == "replace" && a.pos.size() == 2) return method(Json(to_text(v)), "replace", a);
    if (f == "int") {
      if (v.is_number_integer()) return v;
      if (v.is_number()) {
        const double d = v.get<double>();  // outside int64 (or NaN) the cast is UB
        return std::isfinite(d) && std::fabs(d) < 9.2e18 ? Json(static_cast<int64_t>(d)) : Json(0);
      }
      int64_t r = 0;
      const std::string t = strip(to_text(v), true, true);
      return std::from_chars(t.data(), t.data() + t.size(), r).ec == std::errc() ? Json(r)
                                                                                 : Json(0);
    }
    if (f == "abs" && v.is_number()) {
      if (!v.is_number_integer()) return std::fabs(v.get<double>());
      const int64_t i = v.get<int64_t>();
      if (i == INT64_MIN) return value_error("integer overflow in: " + src_);
      return std::abs(i);
    }
    if (f == "select" || f == "reject") return select(v, a, false, f == "select");
    if (f == "selectattr" || f == "rejectattr") return select(v, a, true, f == "selectattr");
    if (f == "map") {
      Json out = Json::array();
      const Json attribute = a.at(99, "attribute");
      for (const Json& item : v.is_array() ? v : Json::array())
        out.push_back(attribute.is_string() ? index(item, attribute)
                      : !a.pos.empty() && a.pos[0].is_string()
                          ? filter(item, a.pos[0].get<std::string>(), {})
                          : item);
      return out;
    }
    fail("unsupported filter '" + f + "' in: " + src_);
  }
  static Json split_chars(const Json& v) {
    Json out = Json::array();
    for (const char c : to_text(v)) out.push_back(std::string(1, c));
    return out;
  }
  Json postfix() {
    Json v = primary();
    for (;;) {
      if (accept(".")) {
        const std::string attr = name();
        if (accept("("))
          v = method(v, attr, args());
        else
          v = index(v, attr);
      } else if (accept("[")) {
        Json lo = is(":") ? kUndefined : ternary();
        if (accept(":")) {
          Json hi = is("]") || is(":") ? kUndefined : ternary();
          Json step = kUndefined;
          if (accept(":") && !is("]")) step = ternary();
          v = slice(v, lo, hi, step);
        } else {
          v = index(v, lo);
        }
        expect("]");
      } else if (accept("|")) {
        const std::string f = name();
        v = filter(v, f, accept("(") ? args() : Args{});
      } else {
        return v;
      }
    }
  }
  Json primary() {
    const Tok t = peek();
    ++pos_;
    if (t.kind == Tok::Str) {
      std::string s = t.text;
      while (peek().kind == Tok::Str) s += toks_[pos_++].text;  // adjacent literals join
      return s;
    }
    if (t.kind == Tok::Num) return t.num;
    if (t.kind == Tok::Name) {
      if (t.text == "true" || t.text == "True") return true;
      if (t.text == "false" || t.text == "False") return false;
      if (t.text == "none" || t.text == "None") return nullptr;
      if (t.text == "raise_exception" && accept("(")) {
        const std::vector<Json> a = args().pos;
        return value_error("template error: " + (a.empty() ? std::string() : to_text(a[0])));
      }
      // strftime_now(format): the local time, as transformers and vLLM give templates (Llama
      // 3.2's writes today's date with it). The name alone is defined, as a function is.
      if (t.text == "strftime_now") {
        if (!accept("(")) return "<function strftime_now>";
        const std::vector<Json> a = args().pos;
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buf[256];
        const size_t n =
            std::strftime(buf, sizeof buf, a.empty() ? "" : to_text(a[0]).c_str(), &local);
        return std::string(buf, n);
      }
      // namespace(name=value, ...): an object `set ns.name = ...` writes into.
      if (t.text == "namespace" && accept("(")) return args().kw;
      if (t.text == "range" && accept("(")) {
        const std::vector<Json> a = args().pos;
        int64_t lo = 0, hi = 0, step = 1;
        for (const Json& x : a)
          if (!x.is_number_integer()) return value_error("range expects integers in: " + src_);
        if (a.size() == 1) hi = a[0].get<int64_t>();
        if (a.size() >= 2) lo = a[0].get<int64_t>(), hi = a[1].get<int64_t>();
        if (a.size() == 3) step = a[2].get<int64_t>();
        if (step == 0 || a.empty() || a.size() > 3) return value_error("bad range in: " + src_);
        Json out = Json::array();
        for (int64_t i = lo; (step > 0 ? i < hi : i > hi) && out.size() < 100000; i += step)
          out.push_back(i);
        return out;
      }
      auto it = scope_.find(t.text);
      return it == scope_.end() ? kUndefined : *it;
    }
    if (t.text == "(") {
      Json v = ternary();
      expect(")");
      return v;
    }
    if (t.text == "[") {
      Json list = Json::array();
      if (!accept("]")) {
        do list.push_back(ternary());
        while (accept(","));
        expect("]");
      }
      return list;
    }
    if (t.text == "{") {
      Json dict = Json::object();
      if (!accept("}")) {
        do {
          const Json k = ternary();
          expect(":");
          dict[to_text(k)] = ternary();
        } while (accept(","));
        expect("}");
      }
      return dict;
    }
    fail("unexpected '" + t.text + "' in: " + src_);
  }

  const std::string& src_;
  std::vector<Tok> toks_;
  const Json& scope_;
  size_t pos_ = 0;
  int tentative_ = 0;                 // depth of tentative evaluation
  std::optional<std::string> error_;  // the first error of the innermost tentative operand
};

}  // namespace

Json evaluate(const std::string& src, const Json& scope) { return Eval(src, scope).run(); }

}  // namespace tessera::tokenizers::jinja

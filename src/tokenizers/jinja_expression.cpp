// Jinja expressions: lexing, evaluating (operators, tests, filters, methods) and the value rules
// of jinja_expression.h.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/core/error.h"
#include "tokenizers/jinja_expression.h"

namespace tessera::tokenizers::jinja {

[[noreturn]] void fail(const std::string& what) { throw ValueError("[jinja] " + what); }

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
  return v.dump();
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
        const std::string test = name();
        bool r;
        if (test == "defined")
          r = !v.is_discarded();
        else if (test == "none")
          r = v.is_null();
        else if (test == "string")
          r = v.is_string();
        else
          fail("unknown test '" + test + "' in: " + src_);
        v = negate != r;
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
  Json concat() {
    Json v = additive();
    while (accept("~")) v = to_text(v) + to_text(additive());
    return v;
  }
  Json additive() {
    Json v = multiplicative();
    for (;;) {
      if (accept("+")) {
        const Json r = multiplicative();
        if (v.is_string() && r.is_string()) {
          v = v.get<std::string>() + r.get<std::string>();
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
  std::vector<Json> args() {
    std::vector<Json> a;
    if (accept(")")) return a;
    do a.push_back(ternary());
    while (accept(","));
    expect(")");
    return a;
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
  static Json slice(const Json& v, const Json& lo, const Json& hi) {
    const int64_t n =
        v.is_array() ? static_cast<int64_t>(v.size()) : static_cast<int64_t>(to_text(v).size());
    auto bound = [n](const Json& b, int64_t def) {
      if (!b.is_number_integer()) return def;
      int64_t i = b.get<int64_t>();
      if (i < 0) i += n;
      return std::clamp<int64_t>(i, 0, n);
    };
    const int64_t a = bound(lo, 0), b = std::max(a, bound(hi, n));
    if (v.is_array()) return Json(std::vector<Json>(v.begin() + a, v.begin() + b));
    return to_text(v).substr(a, b - a);
  }
  Json method(const Json& v, const std::string& m, const std::vector<Json>& a) {
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (m == "strip") return strip(s, true, true);
      if (m == "lstrip") return strip(s, true, false);
      if (m == "rstrip") return strip(s, false, true);
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r) c = static_cast<char>(m == "upper" ? std::toupper(c) : std::tolower(c));
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
      return r.is_discarded() && a.size() > 1 ? a[1] : r;
    }
    return value_error("unsupported method '" + m + "' in: " + src_);
  }
  Json filter(const Json& v, const std::string& f) {
    if (f == "trim") return strip(to_text(v), true, true);
    if (f == "length" || f == "count")
      return static_cast<int64_t>(v.is_string() ? v.get<std::string>().size() : v.size());
    if (f == "upper" || f == "lower") return method(Json(to_text(v)), f, {});
    if (f == "string") return to_text(v);
    if (f == "tojson") return v.dump();
    fail("unsupported filter '" + f + "' in: " + src_);
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
          Json hi = is("]") ? kUndefined : ternary();
          v = slice(v, lo, hi);
        } else {
          v = index(v, lo);
        }
        expect("]");
      } else if (accept("|")) {
        v = filter(v, name());
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
        const std::vector<Json> a = args();
        return value_error("template error: " + (a.empty() ? std::string() : to_text(a[0])));
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

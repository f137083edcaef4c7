// PatternReader: code points, escapes, classes and counted repeats of regexes and grammars.
#include "infer/pattern_reader.h"

#include <algorithm>
#include <cctype>

#include "tessera/core/error.h"

namespace tessera::infer::regex {

namespace {

constexpr int32_t kMaxRepeat = 1000;
const Ranges kDigit{{'0', '9'}};
const Ranges kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const Ranges kSpace{{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                    {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

}  // namespace

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end(), [](CodeRange a, CodeRange b) { return a.lo < b.lo; });
  Ranges out;
  for (CodeRange c : r) {
    if (!out.empty() && c.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, c.hi);
    else
      out.push_back(c);
  }
  return out;
}

Ranges complement(const Ranges& r) {  // r normalized
  Ranges out;
  uint32_t next = 0;
  for (CodeRange c : r) {
    if (c.lo > next) out.push_back({next, c.lo - 1});
    next = c.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

const Ranges kLineTerminator{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

void PatternReader::fail(const std::string& what) const {
  throw ValueError("[" + std::string(who_) + "] " + what + " at position " + std::to_string(pos_) +
                   " of '" + std::string(p_) + "'");
}

uint32_t PatternReader::code_point() {
  const auto b = static_cast<uint8_t>(p_[pos_]);
  const int extra = b < 0x80 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : -1;
  if (extra < 0 || pos_ + static_cast<size_t>(extra) >= p_.size()) fail("invalid UTF-8");
  uint32_t cp = extra == 0 ? b : b & (0x3F >> extra);
  for (int i = 1; i <= extra; ++i) {
    const auto c = static_cast<uint8_t>(p_[pos_ + static_cast<size_t>(i)]);
    if ((c & 0xC0) != 0x80) fail("invalid UTF-8");
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp > kMaxCodePoint) fail("invalid UTF-8");
  pos_ += static_cast<size_t>(extra) + 1;
  return cp;
}

bool PatternReader::quantifier(int32_t& lo, int32_t& hi) {
  lo = 0, hi = -1;
  if (eat('*')) return true;
  if (eat('+')) {
    lo = 1;
    return true;
  }
  if (eat('?')) {
    hi = 1;
    return true;
  }
  return counted(lo, hi);
}

bool PatternReader::counted(int32_t& lo, int32_t& hi) {
  if (!counted_ahead()) return false;
  ++pos_;
  lo = number();
  hi = lo;
  if (eat(',')) hi = peek() == '}' ? -1 : number();
  ++pos_;  // '}'
  if (hi >= 0 && hi < lo) fail("a repeat's maximum is below its minimum");
  return true;
}
bool PatternReader::counted_ahead() const {
  size_t i = pos_;
  if (i >= p_.size() || p_[i] != '{') return false;
  auto digits = [&] {
    const size_t from = i;
    while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') ++i;
    return i > from;
  };
  ++i;
  if (!digits()) return false;
  if (i < p_.size() && p_[i] == ',') {
    ++i;
    digits();
  }
  return i < p_.size() && p_[i] == '}';
}
int32_t PatternReader::number() {
  int64_t v = 0;
  while (peek() >= '0' && peek() <= '9' && !done()) {
    v = v * 10 + (p_[pos_++] - '0');
    if (v > kMaxRepeat) fail("repeat counts above " + std::to_string(kMaxRepeat));
  }
  return static_cast<int32_t>(v);
}

int32_t PatternReader::char_class() {
  ++pos_;  // '['
  const bool negated = eat('^');
  Ranges r;
  bool first = true;
  for (;;) {
    if (done()) fail("a '[' without its ']'");
    if (peek() == ']' && !first) {
      ++pos_;
      break;
    }
    first = false;
    Ranges item;
    const bool single = class_item(item);
    if (single && peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
      ++pos_;
      Ranges upper;
      if (!class_item(upper)) fail("a class range must end at a single character");
      if (upper[0].lo < item[0].lo) fail("a class range out of order");
      item = {{item[0].lo, upper[0].lo}};
    }
    r.insert(r.end(), item.begin(), item.end());
  }
  r = normalized(std::move(r));
  return chars(negated ? complement(r) : r);
}

// One character or escape inside a class; whether it is a single character.
bool PatternReader::class_item(Ranges& out) {
  if (eat('\\')) {
    if (!escape(out, /*in_class=*/true)) fail("a '[' without its ']'");
    return out.size() == 1 && out[0].lo == out[0].hi;
  }
  const uint32_t cp = code_point();
  out = {{cp, cp}};
  return true;
}

bool PatternReader::escape(Ranges& out, bool in_class) {
  if (done()) return false;
  const char c = p_[pos_];
  auto one = [&](uint32_t cp) { out = {{cp, cp}}; };
  auto hex = [&](int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0 || done()) fail("expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  };
  ++pos_;
  switch (c) {
    case 'd':
      out = kDigit;
      return true;
    case 'D':
      out = complement(kDigit);
      return true;
    case 'w':
      out = kWord;
      return true;
    case 'W':
      out = complement(kWord);
      return true;
    case 's':
      out = kSpace;
      return true;
    case 'S':
      out = complement(normalized(kSpace));
      return true;
    case 'n':
      one('\n');
      return true;
    case 'r':
      one('\r');
      return true;
    case 't':
      one('\t');
      return true;
    case 'f':
      one('\f');
      return true;
    case 'v':
      one('\v');
      return true;
    case 'x':
      one(hex(2));
      return true;
    case 'u':
      one(hex(4));
      return true;
    case 'U':
      one(hex(8));
      if (out[0].lo > kMaxCodePoint) fail("a code point beyond U+10FFFF");
      return true;
    case 'b':
      if (in_class) {
        one('\b');
        return true;
      }
      break;
    case '0':
      if (peek() < '0' || peek() > '9' || done()) {
        one(0);
        return true;
      }
      break;
    default:
      if (!std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 0x80) {
        one(static_cast<uint8_t>(c));
        return true;
      }
  }
  pos_ -= 2;  // the errors below point at the backslash
  if (c >= '1' && c <= '9') fail("backreferences are not supported");
  if (c == 'b' || c == 'B') fail("word boundaries are not supported");
  if (c == 'p' || c == 'P') fail("Unicode property escapes are not supported");
  fail(std::string("unknown escape '\\") + c + "'");
}

}  // namespace tessera::infer::regex

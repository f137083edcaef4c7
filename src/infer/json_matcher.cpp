// JsonMatcher: a pushdown recognizer over bytes. Each alternative (thread) is a stack of frames:
// a value about to start, an object, array, string, number or literal (enum, const, true, false,
// null, or an object's known keys) in progress. A frame that finishes pops itself; its parent
// already says what may follow (an object waiting for its colon, an array for ',' or ']').
// Numbers, and literals one of which extends another (enum [1, 12]), learn they ended only from
// the next byte: they pop and hand that byte to their parent.
#include <algorithm>
#include <bit>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/infer/structured_output.h"

namespace tessera::infer {

namespace {

using Frame = JsonMatcher::Frame;
using Kind = JsonGrammar::Kind;

// kRule: a grammar() rule, count its index and dfa its state; the frames below are the rules
// that called it, each at the state it goes on from.
enum FrameKind : uint8_t { kValue, kObject, kArray, kString, kNumber, kLiteral, kRule };
enum ObjectState : uint8_t { kObjectOpen, kObjectColon, kObjectAfterValue, kObjectComma };
enum ArrayState : uint8_t { kArrayOpen, kArrayAfterValue, kArrayComma };
// A string's body, after a backslash, or with 1..4 hex digits of \uXXXX left (state 1 + left);
// or a regex over raw text (a regex() root: no quotes, no escapes).
enum StringState : uint8_t { kStringBody, kStringEscape, kStringRaw = 16 };
enum NumberState : uint8_t {
  kNumberStart,
  kNumberMinus,
  kNumberZero,
  kNumberInt,
  kNumberDot,
  kNumberFrac,
  kNumberExp,
  kNumberExpSign,
  kNumberExpDigit
};

// Integers of at most 18 characters fit a signed 64-bit integer.
constexpr uint32_t kMaxNumberChars = 32, kMaxIntegerChars = 18, kMaxExponentDigits = 2;
// A ranged number with decimals: at most 11 + 6 digits, also below 10^18.
constexpr uint32_t kMaxRangedIntegerDigits = 11;
constexpr size_t kMaxDepth = 64, kMaxThreads = 64;
constexpr int kMaxUnionNesting = 16;  // a $ref cycle without a value in between ends here
constexpr int kMaxRuleSteps = 256;    // calls and returns one byte may go through

bool is_whitespace(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint32_t hex_value(uint8_t c) { return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }

// What a short escape after a backslash stands for, or -1.
int short_escape(uint8_t c) {
  switch (c) {
    case '"':
    case '\\':
    case '/':
      return c;
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return -1;
  }
}

// Whether some byte in [first, first + count) keeps a pattern alive from state.
bool takes_any(const RegexDfa& re, int32_t state, uint32_t first, uint32_t count) {
  for (uint32_t b = first; b < first + count; ++b)
    if (re.step(state, static_cast<uint8_t>(b)) != RegexDfa::kDead) return true;
  return false;
}

// A UTF-8 lead byte: how many continuation bytes follow, and the range of the first of them
// (lo | hi << 8), which excludes overlong forms, surrogates and values beyond U+10FFFF.
struct Utf8Lead {
  int32_t continuations;  // 0: not a lead byte
  uint64_t next_range;
};
constexpr uint64_t kContinuation = 0x80 | (0xBF << 8);
Utf8Lead utf8_lead(uint8_t c) {
  auto range = [](uint64_t lo, uint64_t hi) { return lo | (hi << 8); };
  if (c >= 0xC2 && c <= 0xDF) return {1, kContinuation};
  if (c == 0xE0) return {2, range(0xA0, 0xBF)};
  if (c == 0xED) return {2, range(0x80, 0x9F)};
  if (c >= 0xE1 && c <= 0xEF) return {2, kContinuation};
  if (c == 0xF0) return {3, range(0x90, 0xBF)};
  if (c == 0xF4) return {3, range(0x80, 0x8F)};
  if (c >= 0xF1 && c <= 0xF3) return {3, kContinuation};
  return {0, 0};
}

bool number_accepting(uint8_t state) {
  return state == kNumberZero || state == kNumberInt || state == kNumberFrac ||
         state == kNumberExpDigit;
}

// The number state after c, or -1: a fraction only if `decimals` (a ranged number's), an
// exponent only if `exponent` (an unranged one's).
int number_next(uint8_t state, uint8_t c, bool decimals, bool exponent) {
  const bool digit = is_digit(c);
  const bool e = exponent && (c == 'e' || c == 'E');
  switch (state) {
    case kNumberStart:
      return c == '-' ? kNumberMinus : c == '0' ? kNumberZero : digit ? kNumberInt : -1;
    case kNumberMinus:
      return c == '0' ? kNumberZero : digit ? kNumberInt : -1;
    case kNumberZero:
    case kNumberInt:
      if (digit && state == kNumberInt) return kNumberInt;
      return c == '.' && decimals ? kNumberDot : e ? kNumberExp : -1;
    case kNumberDot:
      return digit ? kNumberFrac : -1;
    case kNumberFrac:
      return digit ? kNumberFrac : e ? kNumberExp : -1;
    case kNumberExp:
      return (c == '+' || c == '-') ? kNumberExpSign : digit ? kNumberExpDigit : -1;
    case kNumberExpSign:
    case kNumberExpDigit:
      return digit ? kNumberExpDigit : -1;
    default:
      return -1;
  }
}

// A ranged number's frame keeps its magnitude so far in bits (units of 10^-decimals), its sign in
// negative and, after its '.', its fraction digits in pending. Whether some value that starts as
// written so far lies in [n.minimum, n.maximum]: magnitudes [a, b] (below 10^18) are all
// reachable, each a whole number of units: one of them must be a multiple of n.multiple in range.
bool ranged_overlaps(bool negative, uint64_t a, uint64_t b, const JsonGrammar::Node& n) {
  const int64_t lo =
      std::max(n.minimum, negative ? -static_cast<int64_t>(b) : static_cast<int64_t>(a));
  const int64_t hi =
      std::min(n.maximum, negative ? -static_cast<int64_t>(a) : static_cast<int64_t>(b));
  const int64_t first = lo / n.multiple * n.multiple;  // rounded towards 0
  return lo <= hi && (first < lo ? first + n.multiple : first) <= hi;
}

uint64_t power_of_10(int32_t k) {
  uint64_t p = 1;
  for (int32_t i = 0; i < k; ++i) p *= 10;
  return p;
}

// In the integer part: `digits` written (0 after a '-' alone), at most `room` more.
bool ranged_reachable(bool negative, uint64_t magnitude, uint32_t digits, uint32_t room,
                      const JsonGrammar::Node& n) {
  const uint64_t unit = power_of_10(n.decimals);  // one in the integer part
  if (digits == 0)  // a '-' alone: any magnitude of 1 to room digits (0 as "-0")
    return room > 0 &&
           ranged_overlaps(negative, 0, power_of_10(static_cast<int32_t>(room)) * unit - 1, n);
  if (magnitude == 0) return ranged_overlaps(negative, 0, unit - 1, n);  // "0" cannot go on
  // k more integer digits, then any fraction: [m 10^k, (m + 1) 10^k) in units.
  for (uint64_t k = 0, scale = 1; k <= room; ++k, scale *= 10)
    if (ranged_overlaps(negative, magnitude * scale, magnitude * scale + scale * unit - 1, n))
      return true;
  return false;
}

// Takes c (a '-', a digit or a '.' the syntax allows; `next` the state it leads to) into ranged
// frame f if some value in range can still follow.
bool ranged_step(Frame& f, uint8_t c, int next, const JsonGrammar::Node& n) {
  const bool negative = f.negative || c == '-';
  if (next == kNumberDot || next == kNumberFrac) {
    const int32_t fraction = next == kNumberDot ? 0 : f.pending + 1;
    if (fraction > n.decimals) return false;
    const uint64_t unit = power_of_10(n.decimals - fraction);  // of the last digit written
    const uint64_t magnitude = f.bits + (next == kNumberFrac ? (c - '0') * unit : 0);
    if (!ranged_overlaps(negative, magnitude, magnitude + unit - 1, n)) return false;
    f.bits = magnitude;
    f.pending = fraction;
    return true;
  }
  // The integer part: integers of at most 18 characters, other numbers of 11 digits.
  const uint32_t digits = c == '-' ? 0 : f.count + 1 - negative;
  const uint32_t most = n.decimals == 0 ? kMaxIntegerChars - negative : kMaxRangedIntegerDigits;
  if (digits > most) return false;
  const uint64_t magnitude = c == '-' ? 0 : f.bits * 10 + (c - '0') * power_of_10(n.decimals);
  if (!ranged_reachable(negative, magnitude, digits, most - digits, n)) return false;
  f.negative = negative;
  f.bits = magnitude;
  return true;
}

// A number that may end here: its state, and for a ranged one its range.
bool number_complete(const JsonGrammar& g, const Frame& f) {
  if (!number_accepting(f.state)) return false;
  const JsonGrammar::Node& n = g.node(f.node);
  if (n.kind != Kind::Ranged) return true;
  const auto value = f.negative ? -static_cast<int64_t>(f.bits) : static_cast<int64_t>(f.bits);
  return value >= n.minimum && value <= n.maximum && value % n.multiple == 0;
}

// The texts a literal frame chooses among.
const std::string& literal_text(const JsonGrammar& g, const Frame& f, int i) {
  const JsonGrammar::Node& n = g.node(f.node);
  return f.is_key ? n.properties[static_cast<size_t>(i)].key : n.literals[static_cast<size_t>(i)];
}

uint64_t all_bits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

}  // namespace

// Feeds one byte to a thread's stack and emits each state it can lead to into a matcher.
class JsonStepper {
 public:
  JsonStepper(const JsonGrammar& g, JsonMatcher& out) : g_(g), out_(out) {}

  void feed(std::vector<Frame>& s, uint8_t whitespace, uint8_t c, int unions = 0) {
    if (s.empty()) return;  // the value is complete: nothing may follow
    Frame& f = s.back();
    const bool white = is_whitespace(c);
    switch (f.kind) {
      case kValue:
        if (white) return skip_whitespace(s, whitespace);
        return start_value(s, whitespace, c, unions);
      case kObject:
        if (white) return skip_whitespace(s, whitespace);
        return object(s, c);
      case kArray:
        if (white) return skip_whitespace(s, whitespace);
        return array(s, whitespace, c);
      case kString:
        return string(s, c);
      case kNumber: {
        const JsonGrammar::Node& n = g_.node(f.node);
        const bool ranged = n.kind == Kind::Ranged;
        const int next = number_next(f.state, c, !ranged || n.decimals > 0, !ranged);
        // Only into a state the bound lets finish: '-', '.', 'e' and its sign need a digit after.
        const uint32_t room = next >= 0 && number_accepting(static_cast<uint8_t>(next)) ? 1 : 2;
        // At most 2 exponent digits: every number stays within a double's range.
        const bool exponent_full = next == kNumberExpDigit && f.bits == kMaxExponentDigits;
        if (next >= 0 && f.count + room <= kMaxNumberChars && !exponent_full &&
            (!ranged || ranged_step(f, c, next, n))) {
          if (next == kNumberExpDigit) ++f.bits;
          f.state = static_cast<uint8_t>(next);
          ++f.count;
          return emit(s);
        }
        if (!number_complete(g_, f)) return;
        s.pop_back();  // the number ended before c
        return feed(s, whitespace, c);
      }
      case kLiteral:
        return literal(s, whitespace, c);
      case kRule:
        return rule(s, c, 0);
      default:
        return;
    }
  }

  // The way of rule() in which the top rule's DFA takes c itself.
  void rule_step(std::vector<Frame>& s, uint8_t c) {
    Frame& f = s.back();
    const int32_t next = g_.node(f.node).rules->rule(static_cast<int32_t>(f.count)).step(f.dfa, c);
    if (next == RegexDfa::kDead) return;
    f.dfa = next;
    pop_finished_rules(s);
    emit(s);
  }

 private:
  void emit(const std::vector<Frame>& s, uint8_t whitespace = 0) {
    out_.push_thread(s, whitespace);
  }

  void skip_whitespace(const std::vector<Frame>& s, uint8_t whitespace) {
    if (whitespace < g_.max_whitespace()) emit(s, static_cast<uint8_t>(whitespace + 1));
  }

  bool push(std::vector<Frame>& s, Frame f) {
    if (s.size() >= kMaxDepth) return false;
    s.push_back(f);
    return true;
  }

  void start_value(std::vector<Frame>& s, uint8_t whitespace, uint8_t c, int unions) {
    Frame& f = s.back();
    const JsonGrammar::Node& n = g_.node(f.node);
    switch (n.kind) {
      case Kind::Union:
        if (unions >= kMaxUnionNesting) return;
        for (int32_t alt : n.alternatives) {
          std::vector<Frame> t = s;
          t.back().node = alt;
          feed(t, whitespace, c, unions + 1);
        }
        return;
      case Kind::Any: {
        const int32_t node = c == '{'                  ? JsonGrammar::kAnyObject
                             : c == '['                ? JsonGrammar::kAnyArray
                             : c == '"'                ? JsonGrammar::kString
                             : c == '-' || is_digit(c) ? JsonGrammar::kNumber
                             : c == 't' || c == 'f'    ? JsonGrammar::kBoolean
                             : c == 'n'                ? JsonGrammar::kNull
                                                       : -1;
        if (node < 0) return;
        f.node = node;
        return start_value(s, whitespace, c, unions);
      }
      case Kind::Object:
        if (c != '{') return;
        f = Frame{.node = f.node, .kind = kObject, .state = kObjectOpen};
        return emit(s);
      case Kind::Array:
        if (c != '[') return;
        f = Frame{.node = f.node, .kind = kArray, .state = kArrayOpen};
        return emit(s);
      case Kind::String:
        if (c != '"') return;
        f = Frame{.node = f.node, .kind = kString, .state = kStringBody};
        if (n.pattern) f.dfa = n.pattern->start();
        return emit(s);
      case Kind::Number:
      case Kind::Ranged:
        f = Frame{.node = f.node, .kind = kNumber, .state = kNumberStart};
        return feed(s, whitespace, c);
      case Kind::Literals:
        f = Frame{.node = f.node, .kind = kLiteral, .bits = all_bits(n.literals.size())};
        return feed(s, whitespace, c);
      case Kind::Rules:  // only ever a raw_text() root
        return;
    }
  }

  void object(std::vector<Frame>& s, uint8_t c) {
    Frame& f = s.back();
    const JsonGrammar::Node& n = g_.node(f.node);
    // Properties so far: listed ones seen, or free keys written (f.count).
    const int64_t count = n.properties.empty() ? f.count : std::popcount(f.bits);
    const bool complete = (n.required & ~f.bits) == 0 && count >= n.min_count;
    // The keys that may come next: below maxProperties, with room left for the required ones.
    uint64_t unseen = all_bits(n.properties.size()) & ~f.bits;
    const int64_t missing = std::popcount(n.required & ~f.bits);
    if (n.max_count >= 0 && count + 1 + missing > n.max_count) unseen &= n.required;
    const bool room = n.max_count < 0 || count < n.max_count;
    switch (f.state) {
      case kObjectOpen:
      case kObjectComma:
        if (c == '}' && f.state == kObjectOpen && complete) {
          s.pop_back();
          return emit(s);
        }
        if (c != '"' || !room) return;
        if (!n.properties.empty()) {
          if (unseen == 0) return;
          f.state = kObjectColon;
          if (!push(s, Frame{.node = s.back().node, .kind = kLiteral, .is_key = 1, .bits = unseen}))
            return;
          return feed(s, 0, c);
        }
        if (n.additional < 0) return;  // additionalProperties false: only {}
        ++f.count;
        f.state = kObjectColon;
        f.pending = n.additional;
        if (!push(s, Frame{.node = JsonGrammar::kString, .kind = kString, .state = kStringBody}))
          return;
        return emit(s);
      case kObjectColon:
        if (c != ':') return;
        f.state = kObjectAfterValue;
        if (!push(s, Frame{.node = f.pending, .kind = kValue})) return;
        return emit(s);
      case kObjectAfterValue:
        if (c == ',' && room && (unseen != 0 || n.additional >= 0)) {
          f.state = kObjectComma;
          return emit(s);
        }
        if (c == '}' && complete) {
          s.pop_back();
          return emit(s);
        }
        return;
      default:
        return;
    }
  }

  void array(std::vector<Frame>& s, uint8_t whitespace, uint8_t c) {
    Frame& f = s.back();
    const JsonGrammar::Node& n = g_.node(f.node);
    const bool closable = static_cast<int64_t>(f.count) >= n.min_count;
    const bool room = n.max_count < 0 || static_cast<int64_t>(f.count) < n.max_count;
    if (f.state == kArrayAfterValue) {
      if (c == ',' && room) {
        f.state = kArrayComma;
        emit(s);
      } else if (c == ']' && closable) {
        s.pop_back();
        emit(s);
      }
      return;
    }
    if (c == ']' && f.state == kArrayOpen && closable) {
      s.pop_back();
      return emit(s);
    }
    if (!room) return;
    f.state = kArrayAfterValue;
    const int32_t item = f.count < n.prefix_items.size() ? n.prefix_items[f.count] : n.items;
    ++f.count;
    // Distinct items: the literal starts among the values not written yet (bits).
    const uint64_t fresh = all_bits(g_.node(item).literals.size()) & ~f.bits;
    if (!push(s, n.unique_items ? Frame{.node = item, .kind = kLiteral, .bits = fresh}
                                : Frame{.node = item, .kind = kValue}))
      return;
    feed(s, whitespace, c);
  }

  void string(std::vector<Frame>& s, uint8_t c) {
    Frame& f = s.back();
    const JsonGrammar::Node& n = g_.node(f.node);
    const RegexDfa* re = n.pattern.get();
    // Steps the pattern over a byte of the string's value; false if it could not match then.
    auto take = [&](uint8_t b) {
      if (re == nullptr) return true;
      const int32_t next = re->step(f.dfa, b);
      if (next == RegexDfa::kDead) return false;
      f.dfa = next;
      return true;
    };
    if (f.state == kStringRaw) {  // the whole text is the value; it ends where nothing can follow
      if (!take(c)) return;
      if (re->final(f.dfa)) s.pop_back();
      return emit(s);
    }
    // A character counts at its first byte (an escape at its backslash), so a string at its
    // maximum length cannot start one it could not finish.
    auto count_char = [&] {
      ++f.count;
      return n.max_count < 0 || static_cast<int64_t>(f.count) <= n.max_count;
    };
    if (f.state == kStringBody && f.pending > 0) {  // inside a UTF-8 character
      if (c < (f.bits & 0xFF) || c > (f.bits >> 8) || !take(c)) return;
      --f.pending;
      f.bits = kContinuation;
      return emit(s);
    }
    if (f.state == kStringBody) {
      if (c == '"') {
        if (static_cast<int64_t>(f.count) < n.min_count) return;
        if (re != nullptr && !re->accepting(f.dfa)) return;
        s.pop_back();
        return emit(s);
      }
      if (c == '\\') {
        // With a pattern, only escapes of characters it can take next (control characters,
        // which need one, and the three punctuation escapes).
        if (re != nullptr && !takes_any(*re, f.dfa, 0, 0x20) && !takes_any(*re, f.dfa, '"', 1) &&
            !takes_any(*re, f.dfa, '\\', 1) && !takes_any(*re, f.dfa, '/', 1))
          return;
        if (!count_char()) return;
        f.state = kStringEscape;
        return emit(s);
      }
      if (c < 0x20) return;
      if (c >= 0x80) {  // JSON text is UTF-8: a lead byte, then what it allows
        const Utf8Lead lead = utf8_lead(c);
        if (lead.continuations == 0) return;
        f.pending = lead.continuations;
        f.bits = lead.next_range;
      }
      if (!count_char() || !take(c)) return;
      return emit(s);
    }
    if (f.state == kStringEscape) {
      if (c == 'u') {  // with a pattern, \u00XX of a control character it takes
        if (re != nullptr && !takes_any(*re, f.dfa, 0, 0x20)) return;
        f.state = kStringEscape + 4;
        f.bits = 0;
        return emit(s);
      }
      const int value = short_escape(c);
      if (value < 0 || !take(static_cast<uint8_t>(value))) return;
      f.state = kStringBody;
      return emit(s);
    }
    if (!is_hex(c)) return;  // \u with hex digits left
    const int left = f.state - kStringEscape;
    if (re != nullptr) {  // \u000X or \u001X, a control character the pattern takes
      const uint64_t value = f.bits * 16 + hex_value(c);
      if (left > 2 && value != 0) return;
      if (left == 2 && (value > 1 || !takes_any(*re, f.dfa, static_cast<uint32_t>(value) * 16, 16)))
        return;
      if (left == 1 && !take(static_cast<uint8_t>(value))) return;
      f.bits = value;
    } else {
      // No surrogates (\uD800-\uDFFF): strict parsers refuse a lone one, and a pair would need
      // two escapes in step; a character beyond U+FFFF can be written as UTF-8.
      if (left == 4) f.bits = (c == 'd' || c == 'D');
      if (left == 3 && f.bits && c >= '8') return;
    }
    if (--f.state == kStringEscape) f.state = kStringBody;
    emit(s);
  }

  void literal(std::vector<Frame>& s, uint8_t whitespace, uint8_t c) {
    Frame& f = s.back();
    uint64_t next = 0;
    int ended = -1, ends_now = -1;  // a candidate complete before c; one c completes
    bool longer = false;            // some candidate goes on after c
    for (uint64_t bits = f.bits; bits != 0; bits &= bits - 1) {
      const int i = std::countr_zero(bits);
      const std::string& t = literal_text(g_, f, i);
      if (f.count == t.size()) {
        if (ended < 0) ended = i;
      } else if (static_cast<uint8_t>(t[f.count]) == c) {
        next |= uint64_t{1} << i;
        if (t.size() == f.count + 1) {
          if (ends_now < 0) ends_now = i;
        } else {
          longer = true;
        }
      }
    }
    if (next != 0) {
      f.bits = next;
      ++f.count;
      if (ends_now >= 0 && !longer) finish_literal(s, ends_now);
      return emit(s);
    }
    if (ended < 0) return;
    finish_literal(s, ended);
    feed(s, whitespace, c);
  }

  // A grammar rule on top: c is taken by its DFA, by a rule it may call here (pushed on the
  // stack), or, where the rule may end, by the rule below that called it. Each way is a thread.
  void rule(const std::vector<Frame>& s, uint8_t c, int steps) {
    if (steps > kMaxRuleSteps) return;
    // Each way starts from a copy of s in a buffer of this depth, reused: the token masker steps
    // through here once per trie node.
    thread_local std::vector<std::vector<Frame>> buffers(kMaxRuleSteps + 1);
    std::vector<Frame>& t = buffers[static_cast<size_t>(steps)];
    const Frame f = s.back();
    const CfgGrammar& g = *g_.node(f.node).rules;
    const RegexDfa& d = g.rule(static_cast<int32_t>(f.count));
    if (d.step(f.dfa, c) != RegexDfa::kDead) {
      t = s;
      rule_step(t, c);
    }
    for (const RegexDfa::Call& call : d.calls(f.dfa)) {
      t = s;
      t.back().dfa = call.next;
      pop_finished_rules(t);  // a tail call leaves nothing of the caller to go on with
      if (!push(t, Frame{.node = f.node,
                         .kind = kRule,
                         .count = static_cast<uint32_t>(call.rule),
                         .dfa = g.rule(call.rule).start()}))
        continue;
      rule(t, c, steps + 1);
    }
    if (d.accepting(f.dfa) && s.size() > 1) {
      t.assign(s.begin(), s.end() - 1);
      rule(t, c, steps + 1);
    }
  }

  // Pops rules whose DFA is final: nothing can follow in them, their callers go on.
  void pop_finished_rules(std::vector<Frame>& s) const {
    while (!s.empty() && s.back().kind == kRule &&
           g_.node(s.back().node)
               .rules->rule(static_cast<int32_t>(s.back().count))
               .final(s.back().dfa))
      s.pop_back();
  }

  // Pops a literal that matched candidate i; a key tells its object which property follows.
  void finish_literal(std::vector<Frame>& s, int i) {
    const Frame f = s.back();
    s.pop_back();
    if (!s.empty() && s.back().kind == kArray && g_.node(s.back().node).unique_items)
      s.back().bits |= uint64_t{1} << i;  // an item of distinct ones: not again
    if (!f.is_key) return;
    Frame& object = s.back();
    object.pending = g_.node(f.node).properties[static_cast<size_t>(i)].value;
    object.bits |= uint64_t{1} << i;
  }

  const JsonGrammar& g_;
  JsonMatcher& out_;
};

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar)
    : grammar_(std::move(grammar)) {
  TESSERA_CHECK(grammar_ != nullptr, ValueError, "[JsonMatcher] expected a grammar, got null");
  // A choice among raw texts starts in its literal, a regex in its raw string, without the
  // whitespace a value may have.
  const JsonGrammar::Node& n = grammar_->node(grammar_->root());
  Frame root{.node = grammar_->root(), .kind = kValue};
  if (grammar_->raw_text() && n.kind == Kind::Literals)
    root = Frame{.node = root.node, .kind = kLiteral, .bits = all_bits(n.literals.size())};
  else if (grammar_->raw_text() && n.kind == Kind::Rules)
    root = Frame{.node = root.node,
                 .kind = kRule,
                 .count = static_cast<uint32_t>(n.rules->root()),
                 .dfa = n.rules->rule(n.rules->root()).start()};
  else if (grammar_->raw_text())
    root =
        Frame{.node = root.node, .kind = kString, .state = kStringRaw, .dfa = n.pattern->start()};
  push_thread({&root, 1}, 0);
}

void JsonMatcher::push_thread(std::span<const Frame> frames, uint8_t whitespace) {
  if (threads_.size() >= kMaxThreads) return;
  for (const Thread& t : threads_)  // the same state reached twice (anyOf branches that agree)
    if (t.whitespace == whitespace && t.end - t.begin == frames.size() &&
        std::equal(frames.begin(), frames.end(), frames_.begin() + t.begin))
      return;
  const auto begin = static_cast<uint32_t>(frames_.size());
  frames_.insert(frames_.end(), frames.begin(), frames.end());
  threads_.push_back({begin, static_cast<uint32_t>(frames_.size()), whitespace});
}

bool JsonMatcher::step_into(uint8_t c, JsonMatcher& out) const {
  if (out.grammar_ != grammar_) out.grammar_ = grammar_;
  out.frames_.clear();
  out.threads_.clear();
  thread_local std::vector<Frame> work;
  JsonStepper stepper(*grammar_, out);
  // First each thread's top rule taking c in its own DFA: at most one state per thread, so the
  // thread cap never drops one, and a token a top rule's DFA takes whole is always taken (the
  // token masker's rule masks rely on it). The full steps below find them again (merged).
  if (threads_.size() > 1)
    for (const Thread& t : threads_)
      if (t.begin != t.end && frames_[t.end - 1].kind == kRule) {
        work.assign(frames_.begin() + t.begin, frames_.begin() + t.end);
        stepper.rule_step(work, c);
      }
  for (const Thread& t : threads_) {
    work.assign(frames_.begin() + t.begin, frames_.begin() + t.end);
    stepper.feed(work, is_whitespace(c) ? t.whitespace : 0, c);
  }
  return !out.threads_.empty();
}

bool JsonMatcher::advance(std::string_view bytes) {
  JsonMatcher cur = *this, next(grammar_);
  for (char c : bytes) {
    if (!cur.step_into(static_cast<uint8_t>(c), next)) return false;
    std::swap(cur, next);
  }
  *this = std::move(cur);
  return true;
}

bool JsonMatcher::accepting() const {
  for (const Thread& t : threads_) {
    if (t.begin == t.end) return true;
    // Rules: each frame's rule may end where it stands.
    if (std::all_of(frames_.begin() + t.begin, frames_.begin() + t.end, [&](const Frame& f) {
          return f.kind == kRule &&
                 grammar_->node(f.node).rules->can_end(static_cast<int32_t>(f.count), f.dfa);
        }))
      return true;
    if (t.end - t.begin != 1) continue;
    const Frame& f = frames_[t.begin];
    if (f.kind == kNumber && number_complete(*grammar_, f)) return true;
    if (f.kind == kString && f.state == kStringRaw &&
        grammar_->node(f.node).pattern->accepting(f.dfa))
      return true;
    if (f.kind == kLiteral)
      for (uint64_t bits = f.bits; bits != 0; bits &= bits - 1)
        if (literal_text(*grammar_, f, std::countr_zero(bits)).size() == f.count) return true;
  }
  return false;
}

bool JsonMatcher::terminated() const {
  return !threads_.empty() && std::all_of(threads_.begin(), threads_.end(),
                                          [](const Thread& t) { return t.begin == t.end; });
}

const RegexDfa* JsonMatcher::only_dfa(int32_t& state) const {
  if (threads_.size() != 1 || threads_[0].end - threads_[0].begin != 1) return nullptr;
  const Frame& f = frames_[threads_[0].begin];
  state = f.dfa;
  if (f.kind == kString && f.state == kStringRaw) return grammar_->node(f.node).pattern.get();
  if (f.kind != kRule) return nullptr;
  // The last rule left, which calls no other: its DFA is the rest of the text.
  const RegexDfa& d = grammar_->node(f.node).rules->rule(static_cast<int32_t>(f.count));
  return d.has_calls() ? nullptr : &d;
}

bool JsonMatcher::state_key(std::string& key) const {
  const Kind root = grammar_->node(grammar_->root()).kind;
  if (!grammar_->raw_text() || (root != Kind::String && root != Kind::Rules)) return false;
  // Such frames differ only in their rule (count) and DFA state.
  key.clear();
  auto put = [&](uint32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (const Thread& t : threads_) {
    put(t.end - t.begin);
    for (uint32_t i = t.begin; i < t.end; ++i) {
      put(frames_[i].count);
      put(static_cast<uint32_t>(frames_[i].dfa));
    }
  }
  return true;
}

bool JsonMatcher::rule_tops(std::vector<std::pair<int32_t, int32_t>>& tops) const {
  if (!grammar_->raw_text() || grammar_->node(grammar_->root()).kind != Kind::Rules) return false;
  tops.clear();
  for (const Thread& t : threads_)
    if (t.begin != t.end)
      tops.emplace_back(static_cast<int32_t>(frames_[t.end - 1].count), frames_[t.end - 1].dfa);
  return true;
}

bool JsonMatcher::in_free_string() const {
  return std::all_of(threads_.begin(), threads_.end(), [&](const Thread& t) {
    if (t.begin == t.end) return false;
    const Frame& f = frames_[t.end - 1];
    const JsonGrammar::Node& n = grammar_->node(f.node);
    return f.kind == kString && f.state == kStringBody && f.pending <= 0 && n.max_count < 0 &&
           !n.pattern;
  });
}

}  // namespace tessera::infer

// Structured output: JSON Schema compilation, the byte-level matcher (what it accepts, refuses
// and when a value is complete), and the token masker's trie walk against trying every token.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "tessera/core/error.h"
#include "tessera/infer/structured_output.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "testing/constrained_text.h"
#include "testing/expect_error.h"
#include "testing/shared_data.h"

namespace tessera {
namespace {

using infer::JsonGrammar;
using infer::JsonMatcher;
using Json = nlohmann::json;

std::shared_ptr<const JsonGrammar> schema(const char* text) {
  return JsonGrammar::from_schema(Json::parse(text));
}

using testing::matches;
using testing::prefix;

const char* kPerson = R"({
  "type": "object",
  "title": "person",
  "properties": {
    "name": {"type": "string", "description": "full name"},
    "age": {"type": "integer", "minimum": -5, "maximum": 150},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    "score": {"type": ["number", "null"]}
  },
  "required": ["name", "age"]
})";

TEST(JsonMatcher, AnyObjectTakesJsonObjectsOnly) {
  const auto g = JsonGrammar::any_object();
  for (const char* ok : {"{}", R"({"a": [1, -2.5e3, 0.0, 1E+2, true, false, null], "b": {}})",
                         "{\n  \"x\\u00e9\\\"y\": \"caf\xc3\xa9\\n\"\n}", R"({"a":{"b":[[]]}})"}) {
    JsonMatcher m(g);
    EXPECT_TRUE(m.advance(ok)) << ok;
    EXPECT_TRUE(m.accepting()) << ok;
    EXPECT_TRUE(m.terminated()) << ok;
  }
  for (const char* bad : {"[1]", "1", "\"s\"", R"({"a" 1})", R"({"a":01})", "{,}", R"({"a":1,})",
                          "{} ", R"({"a":tru})", R"({"a":"\x"})", "{\"a\":\"\n\"}", R"({"a":-})",
                          R"({"a":1.})", R"({"a":1e})", R"({'a':1})"})
    EXPECT_FALSE(matches(g, bad)) << bad;
  JsonMatcher open(g);
  EXPECT_TRUE(open.advance(R"({"a": [1, )"));
  EXPECT_FALSE(open.accepting());
  EXPECT_FALSE(open.terminated());
}

TEST(JsonMatcher, FailedAdvanceLeavesTheStateUnchanged) {
  JsonMatcher m(JsonGrammar::any_object());
  ASSERT_TRUE(m.advance(R"({"a":)"));
  EXPECT_FALSE(m.advance("}"));
  EXPECT_TRUE(m.advance("2}"));
  EXPECT_TRUE(m.terminated());
}

TEST(JsonMatcher, ObjectsHoldTheirPropertiesOnceAndTheRequiredOnes) {
  const auto g = schema(kPerson);
  EXPECT_TRUE(matches(g, R"({"name": "x", "age": 3})"));
  EXPECT_TRUE(matches(g, R"({"age":-3,"tags":["b","a"],"name":"","score":null})"));
  EXPECT_TRUE(matches(g, R"({"age": 0, "name": "x", "score": 2.5e-3})"));
  EXPECT_TRUE(prefix(g, R"({"name": "x")"));
  EXPECT_FALSE(prefix(g, R"({"name": "x"})")) << "age is required";
  EXPECT_FALSE(prefix(g, R"({"nick")")) << "not a property";
  EXPECT_FALSE(prefix(g, R"({"name": "x", "name")")) << "twice";
  EXPECT_FALSE(prefix(g, R"({"age": 3.)")) << "an integer";
  EXPECT_FALSE(prefix(g, R"({"age": "3")"));
  EXPECT_FALSE(prefix(g, R"({"age": 151)")) << "maximum 150";
  EXPECT_FALSE(prefix(g, R"({"tags": ["a", "c")"));
  EXPECT_FALSE(prefix(g, R"({"tags": ["a", "b", )")) << "maxItems 2";
  EXPECT_FALSE(prefix(g, R"({"score": true)"));
  EXPECT_FALSE(prefix(g, "[")) << "the root is an object";
  // Once every property is there, only the end may follow.
  EXPECT_FALSE(prefix(g, R"({"name":"x","age":1,"tags":[],"score":1,)"));
}

TEST(JsonMatcher, LiteralsThatExtendOthersEndAtTheNextByte) {
  const auto g = schema(R"({"enum": [1, 12, "x", {"k": [true]}]})");
  JsonMatcher one(g);
  ASSERT_TRUE(one.advance("1"));
  EXPECT_TRUE(one.accepting());
  EXPECT_FALSE(one.terminated()) << "12 may follow";
  ASSERT_TRUE(one.advance("2"));
  EXPECT_TRUE(one.terminated());
  EXPECT_FALSE(prefix(g, "13"));
  EXPECT_TRUE(matches(g, R"("x")"));
  EXPECT_TRUE(matches(g, R"({"k":[true]})")) << "enum values are matched in compact form";
  const auto in_array = schema(R"({"type": "array", "items": {"enum": [1, 12]}})");
  EXPECT_TRUE(matches(in_array, "[1,12,1]"));
  EXPECT_FALSE(prefix(in_array, "[13"));
  EXPECT_TRUE(matches(schema(R"({"const": "on"})"), R"("on")"));
  EXPECT_FALSE(prefix(schema(R"({"const": "on"})"), R"("of)"));
}

TEST(JsonMatcher, AnyOfFollowsEveryBranch) {
  const auto g = schema(R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer"},
                                      {"type": "object", "properties": {"a": {"type": "null"}}}]})");
  EXPECT_TRUE(matches(g, R"("a")"));
  EXPECT_FALSE(prefix(g, R"("ab)"));
  EXPECT_TRUE(matches(g, "-12"));
  EXPECT_TRUE(matches(g, R"({"a": null})"));
  EXPECT_FALSE(prefix(g, "true"));
  EXPECT_TRUE(matches(schema(R"({"type": "string", "nullable": true})"), "null"));
}

TEST(JsonMatcher, RefsResolveRecursively) {
  const auto g = schema(R"({
    "$defs": {"node": {"type": "object",
                       "properties": {"v": {"type": "integer"},
                                      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["v"]}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(matches(g, R"({"v": 1, "children": [{"v": 2, "children": [{"v": 3}]}, {"v": 4}]})"));
  EXPECT_FALSE(prefix(g, R"({"v": 1, "children": [{})")) << "v is required inside too";
  EXPECT_FALSE(prefix(g, R"({"v": 1, "children": [{"w")"));
  // A reference cycle with no value in between matches nothing, and does not hang.
  EXPECT_FALSE(
      prefix(schema(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"), "1"));
}

TEST(JsonMatcher, StringLengthsCountCharactersNotBytes) {
  const auto g = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(matches(g, "\"\xc3\xa9\\n\""));  // 2 characters, 4 bytes of text
  EXPECT_TRUE(matches(g, R"("a\u00e9b")"));
  EXPECT_FALSE(prefix(g, R"("a")")) << "minLength 2";
  EXPECT_FALSE(prefix(g, R"("abcd)")) << "maxLength 3";
  EXPECT_FALSE(prefix(g, R"("abc\)")) << "an escape that would be the fourth character";
}

TEST(JsonMatcher, AChoiceIsOneOfItsTextsExactly) {
  const std::vector<std::string> texts = {"positive", "negative", "neg", "\"quoted\""};
  const auto g = JsonGrammar::choice(texts);
  for (const std::string& t : texts) EXPECT_TRUE(matches(g, t)) << t;
  EXPECT_FALSE(prefix(g, " positive")) << "no whitespace before";
  EXPECT_FALSE(prefix(g, "positive ")) << "nor after";
  EXPECT_FALSE(prefix(g, "posX"));
  JsonMatcher neg(g);
  ASSERT_TRUE(neg.advance("neg"));
  EXPECT_TRUE(neg.accepting());
  EXPECT_FALSE(neg.terminated()) << "negative may go on";
  ASSERT_TRUE(neg.advance("ative"));
  EXPECT_TRUE(neg.terminated());
  EXPECT_TESSERA_ERROR(JsonGrammar::choice(std::vector<std::string>{"a", "a"}), ValueError,
                       "distinct");
  EXPECT_TESSERA_ERROR(JsonGrammar::choice(std::vector<std::string>{}), ValueError, "1 to 64");
}

TEST(JsonMatcher, PatternsHoldForTheDecodedValue) {
  const auto code = schema(R"({"type": "string", "pattern": "^[a-z]+\\d{2}$"})");
  EXPECT_TRUE(matches(code, R"("ab12")"));
  EXPECT_FALSE(matches(code, R"("ab1")"));
  EXPECT_TRUE(prefix(code, R"("ab1)"));
  EXPECT_FALSE(prefix(code, R"("A)"));
  EXPECT_FALSE(prefix(code, R"("ab123)")) << "anchored at the end";
  EXPECT_FALSE(prefix(code, R"("a\)")) << "no escape can write a character it takes";
  // Unanchored, as ECMAScript's RegExp.test: somewhere in the value.
  const auto digit = schema(R"({"pattern": "\\d"})");
  EXPECT_TRUE(matches(digit, R"("x1y")"));
  EXPECT_FALSE(matches(digit, R"("xy")"));
  EXPECT_FALSE(prefix(digit, "1")) << "a pattern alone implies a string";
  // Escapes are decoded before the pattern sees them; \u only for control characters.
  EXPECT_TRUE(matches(schema(R"({"type": "string", "pattern": "^a\"b/$"})"), R"("a\"b\/")"));
  const auto newline = schema(R"({"type": "string", "pattern": "^\\n\\x01?$"})");
  EXPECT_TRUE(matches(newline, R"("\n")"));
  EXPECT_TRUE(matches(newline, R"("\u000a\u0001")"));
  EXPECT_FALSE(prefix(newline, R"("\u000b)"));
  EXPECT_FALSE(prefix(newline, R"("\u001)")) << "no \\u001X is taken: refused a digit early";
  EXPECT_FALSE(prefix(newline, R"("\u00e9)"));
  // With lengths too: both hold.
  const auto both = schema(R"({"type": "string", "pattern": "^\\w*$", "maxLength": 3})");
  EXPECT_TRUE(matches(both, R"("a_1")"));
  EXPECT_FALSE(prefix(both, R"("a_1b)"));
  EXPECT_TRUE(
      matches(schema(R"({"type": "string", "pattern": "^\u00e9+$"})"), "\"\xc3\xa9\xc3\xa9\""));
}

TEST(JsonMatcher, FormatsOpenAIEnforcesHold) {
  auto format = [](const char* f) {
    return schema((std::string(R"({"type": "string", "format": ")") + f + "\"}").c_str());
  };
  const std::vector<std::tuple<const char*, std::vector<const char*>, std::vector<const char*>>>
      cases = {
          {"date",
           {"2026-11-28", "2000-02-29", "2024-02-29", "0001-01-31", "2026-04-30"},
           {"2026-13-01", "2026-1-01", "26-11-28", "2026-02-29", "2100-02-29", "2026-04-31",
            "2026-02-30", "0000-01-01"}},
          {"time",
           {"13:05:59Z", "23:59:59.123+05:30"},
           {"24:00:00Z", "13:05:59", "1:05:59Z", "13:05:60Z"}},
          {"date-time", {"2026-11-28T13:05:59.5Z"}, {"2026-11-28 13:05:59Z", "2026-11-28T13:05Z"}},
          {"email", {"a.b+c@example.co.uk", "x@y.io"}, {"a@b", "a..b@c.io", "@c.io", "a b@c.io"}},
          {"hostname", {"localhost", "a-1.example.com"}, {"-a.com", "a_b.com", "a..b"}},
          {"ipv4",
           {"192.168.0.1", "0.0.0.0", "255.255.255.255"},
           {"256.1.1.1", "01.2.3.4", "1.2.3"}},
          {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000"}},
      };
  for (const auto& [name, good, bad] : cases) {
    const auto g = format(name);
    for (const char* ok : good)
      EXPECT_TRUE(matches(g, std::string("\"") + ok + "\"")) << name << " " << ok;
    for (const char* no : bad)
      EXPECT_FALSE(matches(g, std::string("\"") + no + "\"")) << name << " " << no;
  }
  // Hostnames of at most 253 characters.
  std::string host = "a";
  while (host.size() < 253) host += ".a";
  EXPECT_TRUE(matches(format("hostname"), "\"" + host + "\""));
  EXPECT_FALSE(prefix(format("hostname"), "\"" + host + "a"));
  // A format alone implies a string; with a pattern, both hold.
  EXPECT_FALSE(prefix(schema(R"({"format": "uuid"})"), "1"));
  const auto ours = schema(R"({"type": "string", "format": "email", "pattern": "@tessera\\.ai$"})");
  EXPECT_TRUE(matches(ours, R"("ada@tessera.ai")"));
  EXPECT_FALSE(matches(ours, R"("ada@example.com")")) << "an email, but not the pattern";
  EXPECT_FALSE(prefix(ours, R"("a b)")) << "the pattern, but not an email";
  EXPECT_TESSERA_ERROR(schema(R"({"type": "string", "format": "uuid", "pattern": "^x$"})"),
                       ValueError, "its pattern, format and lengths together");
}

TEST(JsonMatcher, LengthsBesideAPatternNeverStrandAValue) {
  // "abc" is the only value of at most 3 characters: after "ab", only "c" may follow, not "x".
  const auto g = schema(R"({"type": "string", "pattern": "^ab(c|xyz)$", "maxLength": 3})");
  EXPECT_TRUE(matches(g, R"("abc")"));
  EXPECT_FALSE(prefix(g, R"("abx)"));
  // A minimum the pattern can reach only by repeating.
  const auto many = schema(R"({"type": "string", "pattern": "^(ab)+$", "minLength": 3})");
  EXPECT_FALSE(matches(many, R"("ab")"));
  EXPECT_TRUE(matches(many, R"("abab")"));
  // Lengths too long to fold in are counted by the matcher.
  const auto long_one = schema(R"({"type": "string", "pattern": "^a+$", "maxLength": 10000000})");
  EXPECT_TRUE(matches(long_one, R"("aaa")"));
  EXPECT_FALSE(prefix(long_one, R"("ab)"));
  // A date has 10 characters: a maximum of 9 leaves none.
  EXPECT_TESSERA_ERROR(schema(R"({"type": "string", "format": "date", "maxLength": 9})"),
                       ValueError, "matches no text");
}

TEST(JsonMatcher, ARegexIsTheWholeTextAsItIs) {
  const auto g = JsonGrammar::regex(R"(\d{3}-[a-z]+)");
  EXPECT_TRUE(matches(g, "555-ab"));
  EXPECT_FALSE(prefix(g, "\"555")) << "no JSON quoting";
  EXPECT_FALSE(prefix(g, " 555")) << "no whitespace";
  JsonMatcher m(g);
  ASSERT_TRUE(m.advance("555-a"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.terminated()) << "more letters may follow";
  JsonMatcher yes(JsonGrammar::regex("(yes|no)"));
  ASSERT_TRUE(yes.advance("yes"));
  EXPECT_TRUE(yes.accepting());
  EXPECT_TRUE(yes.terminated());
  EXPECT_FALSE(yes.advance("!"));
  EXPECT_TESSERA_ERROR(JsonGrammar::regex("(a{0})?"), ValueError, "matches only the empty text");
  EXPECT_TESSERA_ERROR(JsonGrammar::regex("(a"), ValueError, "[Regex] a '(' without its ')'");
}

TEST(JsonMatcher, IntegerBoundsHoldForEveryCompletion) {
  const auto g = schema(R"({"type": "integer", "minimum": 0, "maximum": 100})");
  for (const char* ok : {"0", "7", "42", "100", "-0"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"101", "1000", "-1", "200"}) EXPECT_FALSE(prefix(g, bad)) << bad;
  JsonMatcher ten(g);
  ASSERT_TRUE(ten.advance("10"));
  EXPECT_TRUE(ten.accepting());
  EXPECT_TRUE(ten.advance("0")) << "100 is in range";
  const auto open = schema(R"({"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 8})");
  EXPECT_TRUE(matches(open, "6") && matches(open, "7"));
  EXPECT_FALSE(prefix(open, "5")) << "nor 5 nor anything longer is in (5, 8)";
  EXPECT_FALSE(prefix(open, "8"));
  const auto negative = schema(R"({"minimum": -30, "maximum": -10})");  // no type: integers
  EXPECT_TRUE(matches(negative, "-30") && matches(negative, "-10"));
  EXPECT_FALSE(prefix(negative, "-9")) << "-9 is above -10, and -90 and beyond below -30";
  EXPECT_FALSE(prefix(negative, "-4"));
  EXPECT_FALSE(prefix(negative, "1"));
  const auto draft4 = schema(R"({"type": "integer", "minimum": 1, "exclusiveMinimum": true})");
  EXPECT_FALSE(matches(draft4, "1"));
  EXPECT_TRUE(matches(draft4, "2"));
  const auto huge = schema(R"({"type": "integer", "maximum": 18446744073709551615})");
  EXPECT_TRUE(matches(huge, "-5")) << "an unsigned 64-bit bound is not wrapped into a negative one";
  EXPECT_TESSERA_ERROR(schema(R"({"type": "integer", "minimum": 10, "maximum": 5})"), ValueError,
                       "within the bounds");
  EXPECT_TESSERA_ERROR(schema(R"({"type": "integer", "minimum": "0"})"), ValueError, "/minimum");
}

TEST(JsonMatcher, NumberBoundsHoldForEveryCompletion) {
  const auto unit = schema(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "1", "0.5", "0.123456", "1.000000", "-0", "0.0"})
    EXPECT_TRUE(matches(unit, ok)) << ok;
  for (const char* bad : {"1.1", "2", "-0.5", "-1", "0.1234567", "1e", "0.5e1"})
    EXPECT_FALSE(prefix(unit, bad)) << bad;
  const auto open = schema(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})");
  EXPECT_FALSE(matches(open, "0"));
  EXPECT_TRUE(matches(open, "0.000001"));
  EXPECT_FALSE(prefix(open, "1")) << "nothing that starts with 1 is below 1";
  // Bounds are decimals, not doubles: 0.1 x 10^6 is not rounded up past 100000.
  const auto tenth = schema(R"({"type": "number", "minimum": 0.1, "maximum": 0.3})");
  EXPECT_TRUE(matches(tenth, "0.1") && matches(tenth, "0.3"));
  EXPECT_FALSE(matches(tenth, "0.099999"));
  EXPECT_FALSE(prefix(tenth, "0.300001"));
  const auto below = schema(R"({"type": ["number", "null"], "minimum": -2.5, "maximum": -1.25})");
  for (const char* ok : {"-2.5", "-1.25", "-2", "null"}) EXPECT_TRUE(matches(below, ok)) << ok;
  for (const char* bad : {"-1.2", "-3", "-1.", "0"}) EXPECT_FALSE(matches(below, bad)) << bad;
  EXPECT_TRUE(matches(schema(R"({"type": "number", "minimum": -1e300})"), "12345678901.5"));
  EXPECT_TESSERA_ERROR(schema(R"({"type": "number", "minimum": 1e-7, "maximum": 9e-7})"),
                       ValueError, "no number of at most 11 integer digits and 6 decimals");
  // multipleOf: exact decimal multiples, on integers those that are integers.
  const auto quarter =
      schema(R"({"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.25})");
  for (const char* ok : {"0", "0.25", "0.5", "1", "0.750"}) EXPECT_TRUE(matches(quarter, ok)) << ok;
  EXPECT_TRUE(prefix(quarter, "0.2")) << "0.25 can follow";
  for (const char* bad : {"0.3", "0.251", "1.25"}) EXPECT_FALSE(prefix(quarter, bad)) << bad;
  const auto fives = schema(R"({"type": "integer", "maximum": 12, "multipleOf": 2.5})");
  EXPECT_TRUE(matches(fives, "10") && matches(fives, "-5") && prefix(fives, "1"));
  EXPECT_FALSE(prefix(fives, "11")) << "neither 11 nor 110 and beyond";
  EXPECT_FALSE(matches(fives, "7"));
  EXPECT_TESSERA_ERROR(schema(R"({"type": "number", "multipleOf": 1e-7})"), ValueError,
                       "/multipleOf");
  EXPECT_TESSERA_ERROR(schema(R"({"type": "integer", "multipleOf": 0})"), ValueError,
                       "expected a number above 0");
  EXPECT_TESSERA_ERROR(
      schema(R"({"type": "integer", "minimum": 1, "maximum": 4, "multipleOf": 5})"), ValueError,
      "within the bounds");
  // Random bounds of up to 3 decimals and multiples: every text the matcher takes can still end
  // in range, and it ends exactly on the values in range.
  std::mt19937 rng(17);
  auto bound = [&] { return (static_cast<int64_t>(rng() % 40001) - 20000); };  // thousandths
  for (int trial = 0; trial < 40; ++trial) {
    int64_t lo = bound(), hi = bound();
    if (lo > hi) std::swap(lo, hi);
    const int64_t multiple = std::array<int64_t, 6>{1, 1, 5, 250, 1000, 1500}[rng() % 6];
    auto text = [](int64_t thousandths) {
      const int64_t m = std::abs(thousandths);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%lld.%03lld", thousandths < 0 ? "-" : "",
                    static_cast<long long>(m / 1000), static_cast<long long>(m % 1000));
      return std::string(buf);
    };
    const std::string where = text(lo) + " to " + text(hi) + " multiples of " + text(multiple);
    const std::string json = R"({"type": "number", "minimum": )" + text(lo) +
                             ", \"maximum\": " + text(hi) + ", \"multipleOf\": " + text(multiple) +
                             "}";
    bool any = false;
    for (int64_t v = lo; v <= hi && !any; ++v) any = v % multiple == 0;
    if (!any) {
      EXPECT_TESSERA_ERROR(schema(json.c_str()), ValueError, "within the bounds");
      continue;
    }
    const auto g = schema(json.c_str());
    for (int64_t v = -21000; v <= 21000; v += 1 + static_cast<int64_t>(rng() % 97))
      ASSERT_EQ(matches(g, text(v)), v >= lo && v <= hi && v % multiple == 0)
          << text(v) << " in " << where;
    // Every prefix taken (up to 4 characters) completes within 7 more.
    const std::string alphabet = "-0123456789.";
    auto completes = [&](auto&& self, const JsonMatcher& m, int left) -> bool {
      if (m.accepting()) return true;
      if (left == 0) return false;
      for (char c : alphabet) {
        JsonMatcher next = m;
        if (next.advance(std::string(1, c)) && self(self, next, left - 1)) return true;
      }
      return false;
    };
    auto visit = [&](auto&& self, const JsonMatcher& m, const std::string& t) -> void {
      ASSERT_TRUE(completes(completes, m, 7)) << "'" << t << "' in " << where;
      if (t.size() == 4) return;
      for (char c : alphabet) {
        JsonMatcher next = m;
        if (next.advance(std::string(1, c))) self(self, next, t + c);
      }
    };
    visit(visit, JsonMatcher(g), "");
  }
}

TEST(JsonMatcher, PropertyCountsHoldWithoutStrandingRequiredOnes) {
  const auto g = schema(R"({"type": "object", "properties": {"a": {"const": 1},
      "b": {"const": 2}, "c": {"const": 3}}, "required": ["c"], "minProperties": 2,
      "maxProperties": 2})");
  EXPECT_TRUE(matches(g, R"({"a": 1, "c": 3})"));
  EXPECT_FALSE(matches(g, R"({"c": 3})")) << "minProperties 2";
  EXPECT_FALSE(prefix(g, R"({"a": 1, "b")")) << "the second key must be the required c";
  EXPECT_FALSE(prefix(g, R"({"c": 3, "a": 1,)")) << "maxProperties 2";
  const auto free = schema(R"({"type": "object", "minProperties": 1, "maxProperties": 2})");
  EXPECT_FALSE(matches(free, "{}"));
  EXPECT_TRUE(matches(free, R"({"x": 1, "y": 2})"));
  EXPECT_FALSE(prefix(free, R"({"x": 1, "y": 2,)"));
  EXPECT_TESSERA_ERROR(schema(R"({"type": "object", "minProperties": 2})"), ValueError,
                       "expected at most 1 without listed properties");
  EXPECT_TESSERA_ERROR(schema(R"({"properties": {"a": {}}, "minProperties": 2})"), ValueError,
                       "expected at most the number of properties at #/minProperties");
  EXPECT_TESSERA_ERROR(
      schema(R"({"properties": {"a": {}, "b": {}}, "required": ["a", "b"], "maxProperties": 1})"),
      ValueError, "expected at least the number of required properties");
}

TEST(JsonMatcher, UniqueItemsOfFixedValuesNeverRepeat) {
  const auto set = schema(R"({"type": "array", "items": {"enum": ["a", "ab", 1]},
      "uniqueItems": true})");
  EXPECT_TRUE(matches(set, R"(["ab", "a", 1])"));
  EXPECT_FALSE(prefix(set, R"(["a", 1, 1)"));
  EXPECT_TRUE(prefix(set, R"(["a", "a)")) << "\"ab\" may still follow";
  EXPECT_FALSE(prefix(set, R"(["a", "a")"));
  EXPECT_FALSE(prefix(set, R"(["a", "ab", 1,)")) << "every value written: the set is full";
  const auto flags = schema(R"({"items": {"$ref": "#/$defs/flag"}, "uniqueItems": true,
      "$defs": {"flag": {"type": "boolean"}}})");
  EXPECT_TRUE(matches(flags, "[true, false]"));
  EXPECT_FALSE(prefix(flags, "[true, true"));
  EXPECT_TRUE(
      matches(schema(R"({"items": {"type": "string"}, "uniqueItems": false})"), R"(["x", "x"])"));
  EXPECT_TESSERA_ERROR(schema(R"({"items": {"type": "string"}, "uniqueItems": true})"), ValueError,
                       "expected items that are fixed values (enum, const, boolean) and no "
                       "prefixItems at #/uniqueItems");
  EXPECT_TESSERA_ERROR(schema(R"({"items": {"enum": [1, 2]}, "uniqueItems": true, "minItems": 3})"),
                       ValueError, "minItems needs more distinct items");
}

TEST(JsonMatcher, TuplesTakeTheirItemsInOrder) {
  const auto pair = schema(R"({"type": "array", "prefixItems": [{"type": "integer"},
      {"type": "string"}], "items": false})");
  for (const char* ok : {R"([1, "a"])", "[1]", "[]"}) EXPECT_TRUE(matches(pair, ok)) << ok;
  EXPECT_FALSE(prefix(pair, R"([1, "a", )")) << "items: false ends the tuple";
  EXPECT_FALSE(prefix(pair, R"(["a")"));
  // pydantic's Tuple[int, str]; then draft 7's list form with additionalItems.
  const auto exact = schema(R"({"type": "array", "prefixItems": [{"type": "integer"},
      {"type": "string"}], "minItems": 2, "maxItems": 2})");
  EXPECT_FALSE(matches(exact, "[1]"));
  EXPECT_TRUE(matches(exact, R"([1,"b"])"));
  const auto draft7 = schema(R"({"items": [{"const": 1}], "additionalItems": {"type": "string"}})");
  EXPECT_TRUE(matches(draft7, R"([1, "x", "y"])"));
  EXPECT_FALSE(prefix(draft7, "[1, 2"));
  EXPECT_TRUE(matches(schema(R"({"prefixItems": [{"const": 1}]})"), "[1, {}, null]"))
      << "items after the prefix are any value unless items says otherwise";
  EXPECT_TESSERA_ERROR(schema(R"({"prefixItems": [{}], "items": [{}]})"), ValueError,
                       "expected a schema after prefixItems");
  EXPECT_TESSERA_ERROR(schema(R"({"prefixItems": [{}], "items": false, "minItems": 2})"),
                       ValueError, "minItems needs more items than items allows");
}

TEST(JsonMatcher, AllOfOneSchemaIsThatSchema) {
  // pydantic v1 wraps a $ref this way to describe it.
  const auto wrapped = schema(R"({"type": "object", "properties": {"n": {"allOf":
      [{"$ref": "#/$defs/small"}], "description": "a count"}}, "required": ["n"],
      "$defs": {"small": {"type": "integer", "maximum": 9}}})");
  EXPECT_TRUE(matches(wrapped, R"({"n": 7})"));
  EXPECT_FALSE(prefix(wrapped, R"({"n": 10)"));
  EXPECT_TESSERA_ERROR(schema(R"({"allOf": [{"type": "integer"}], "minimum": 3})"), ValueError,
                       "merges object schemas of properties and required only, got 'minimum'");
  EXPECT_TESSERA_ERROR(schema(R"({"allOf": [{"type": "string"}], "format": "email"})"), ValueError,
                       "got 'format'");
  EXPECT_TESSERA_ERROR(schema(R"({"allOf": []})"), ValueError, "expected a non-empty array");
}

TEST(JsonMatcher, AllOfObjectSchemasMerge) {
  // OpenAPI's composition: a base by $ref, then the fields of its extension.
  const auto g = schema(R"({"$defs": {"base": {"type": "object", "properties":
      {"id": {"type": "integer"}}, "required": ["id"]}},
      "allOf": [{"$ref": "#/$defs/base", "description": "the base"},
                {"properties": {"name": {"type": "string", "maxLength": 3}},
                 "required": ["name"]}]})");
  EXPECT_TRUE(matches(g, R"({"name": "ab", "id": 4})"));
  EXPECT_FALSE(matches(g, R"({"id": 4})")) << "both schemas' required properties";
  EXPECT_FALSE(prefix(g, R"({"name": "abcd)"));
  EXPECT_FALSE(prefix(g, R"({"x)")) << "only the properties of the schemas";
  EXPECT_TESSERA_ERROR(schema(R"({"allOf": [{"properties": {"a": {"type": "integer"}}},
      {"properties": {"a": {"type": "string"}}}]})"),
                       ValueError,
                       "defined differently in two of its schemas at #/allOf/1/properties/a");
  EXPECT_TESSERA_ERROR(schema(R"({"allOf": [{"properties": {}, "additionalProperties": false},
      {"properties": {"b": {}}}]})"),
                       ValueError, "got 'additionalProperties' at #/allOf/0");
  EXPECT_TESSERA_ERROR(schema(R"({"$defs": {"b": {}}, "allOf": [{"$ref": "#/$defs/b",
      "required": ["x"]}, {}]})"),
                       ValueError, "expected only annotations beside $ref in allOf");
}

TEST(JsonMatcher, WithoutWhitespaceTheTextIsCompact) {
  const auto spaced = schema(kPerson);
  const auto compact = JsonGrammar::without_whitespace(spaced);
  EXPECT_TRUE(matches(compact, R"({"name":"a b","age":3,"tags":["a"]})"));
  EXPECT_TRUE(matches(spaced, R"({"name": "a b", "age": 3})"));
  EXPECT_FALSE(prefix(compact, R"({"name": )"));
  EXPECT_FALSE(prefix(compact, R"({ )"));
  EXPECT_FALSE(prefix(compact, R"({"name":"a","age":3} )")) << "nor after the value";
  EXPECT_EQ(compact->max_whitespace(), 0);
  EXPECT_EQ(spaced->max_whitespace(), 16) << "the grammar it came from is unchanged";
  const auto raw = JsonGrammar::regex("a b");
  EXPECT_EQ(JsonGrammar::without_whitespace(raw), raw) << "a raw text keeps its spaces";
}

TEST(JsonMatcher, StringsAreValidUtf8WithoutSurrogateEscapes) {
  const auto g = schema(R"({"type": "string"})");
  for (const char* ok : {"\"\xc3\xa9\"", "\"\xf0\x9f\x98\x80\"", "\"\xe2\x82\xac\"",
                         "\"\\uD7FF\\uE000\"", "\"\xf4\x8f\xbf\xbf\""})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"\"\x80", "\"\xc3\x28", "\"\xc0\xaf", "\"\xed\xa0\x80", "\"\xf4\x90",
                          "\"\xf5", "\"\xc3\"", "\"\\ud800", "\"\\uDBFF", "\"\\udc00"})
    EXPECT_FALSE(prefix(g, bad)) << bad;
  // A character split across advances (tokens) is completed by the next.
  JsonMatcher m(g);
  ASSERT_TRUE(m.advance("\"\xe2"));
  EXPECT_FALSE(m.in_free_string()) << "inside a character";
  ASSERT_TRUE(m.advance("\x82"));
  EXPECT_FALSE(m.advance("\""));
  ASSERT_TRUE(m.advance("\xac"));
  EXPECT_TRUE(m.in_free_string());
}

TEST(JsonMatcher, WhitespaceRunsAreBounded) {
  const auto g = JsonGrammar::any_object();
  EXPECT_TRUE(prefix(g, "{" + std::string(16, ' ')));
  EXPECT_FALSE(prefix(g, "{" + std::string(17, ' ')));
  EXPECT_TRUE(matches(g, "{" + std::string(16, '\n') + "\"a\"" + std::string(16, ' ') + ":1}"));
  EXPECT_FALSE(prefix(g, R"({"a":1)" + std::string(40, '0')));  // numbers are bounded too
  EXPECT_TRUE(matches(g, R"({"a":1e-99})"));
  EXPECT_FALSE(prefix(g, R"({"a":1e999)"));
  // 31 characters: a '.' or 'e' would leave no room for the digit it needs.
  EXPECT_TRUE(matches(g, R"({"a":)" + std::string(31, '1') + "}"));
  EXPECT_FALSE(prefix(g, R"({"a":)" + std::string(31, '1') + "."));
  EXPECT_TRUE(matches(g, R"({"a":)" + std::string(30, '1') + ".1}"));
  const auto integer = schema(R"({"type": "integer"})");
  EXPECT_TRUE(matches(integer, "-" + std::string(17, '9')));
  EXPECT_FALSE(prefix(integer, std::string(19, '9'))) << "beyond int64";
}

TEST(JsonGrammar, RefusesWhatItCannotGuaranteeNamingTheKeywordAndPlace) {
  EXPECT_TESSERA_ERROR(
      schema(R"j({"properties": {"x": {"pattern": "a(?=b)"}}})j"), ValueError,
      "lookahead is not supported at position 1 of 'a(?=b)' at #/properties/x/pattern");
  EXPECT_TESSERA_ERROR(schema(R"({"properties": {"x": {"type": "integer", "not": {"const": 2}}}})"),
                       ValueError, "'not' at #/properties/x");
  EXPECT_TESSERA_ERROR(schema(R"({"type": "strin"})"), ValueError, "unknown type 'strin'");
  EXPECT_TESSERA_ERROR(schema(R"({"properties": {"a": {}}, "required": ["b"]})"), ValueError,
                       "\"b\" is not one of the properties");
  EXPECT_TESSERA_ERROR(schema(R"({"$ref": "#/$defs/missing"})"), ValueError, "names nothing");
  EXPECT_TESSERA_ERROR(schema(R"({"type": "array", "minItems": 3, "maxItems": 2})"), ValueError,
                       "maxItems is below minItems");
  EXPECT_TESSERA_ERROR(schema("false"), ValueError, "matches nothing");
  EXPECT_TESSERA_ERROR(schema("[]"), ValueError, "must be an object or a boolean");
  EXPECT_TESSERA_ERROR(JsonGrammar::from_schema_text("{\"type\": "), ValueError,
                       "text that is not JSON");
  EXPECT_TRUE(matches(JsonGrammar::from_schema_text(R"({"type": "boolean"})"), "false"));
  // Annotations are not validation: accepted and ignored.
  EXPECT_TRUE(matches(schema(R"({"type": "string", "format": "uri-reference", "default": "x"})"),
                      R"("x")"));
}

// The masker's allowed set equals trying each token's bytes on a copy of the matcher.
void expect_mask_matches_every_token(const tokenizers::Tokenizer& tok,
                                     const std::shared_ptr<const JsonGrammar>& g,
                                     std::string_view text, std::span<const int32_t> excluded) {
  infer::TokenMasker masker(tok, excluded);
  JsonMatcher m(g);
  std::vector<uint8_t> allowed;
  int64_t checked = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i > 0) ASSERT_TRUE(m.advance(text.substr(i - 1, 1))) << text.substr(0, i);
    masker.allowed_tokens(m, allowed);
    ASSERT_EQ(allowed.size(), static_cast<size_t>(tok.vocab_size()));
    int64_t n = 0;
    for (int32_t t = 0; t < tok.vocab_size(); ++t) {
      const std::string b = std::find(excluded.begin(), excluded.end(), t) != excluded.end()
                                ? ""
                                : tok.token_to_string(t);
      JsonMatcher copy = m;
      const bool want = !b.empty() && copy.advance(b);
      ASSERT_EQ(allowed[t] != 0, want)
          << "token " << t << " '" << b << "' after '" << text.substr(0, i) << "'";
      n += want;
    }
    checked += n;
    if (i < text.size()) EXPECT_GT(n, 0) << "the text's own next byte is a token";
  }
  EXPECT_GT(checked, 0);
}

TEST(TokenMasker, AllowsExactlyTheTokensThatKeepTheMatcherInsideCharTokens) {
  const std::string text =
      R"({"name": "J\u00e9 \"o\"", "age": 42, "tags": ["a"], "score": -1.5e2})";
  tokenizers::CharTokenizer tok(text + "xyz0123456789{}[],:\"\\ \nbtrufalsenm");
  expect_mask_matches_every_token(tok, schema(kPerson), text, {});
}

TEST(TokenMasker, AllowsExactlyTheTokensThatKeepTheMatcherInsideGpt2) {
  const std::filesystem::path dir = testing::shared_data_path("gpt2");
  if (!std::filesystem::exists(dir / "encoder.json"))
    GTEST_SKIP() << "shared test data missing: " << dir;
  const auto tok = tokenizers::GPT2Tokenizer::from_directory(dir.string());
  const int32_t eos = *tok->eos_id();
  // Prefixes in a string, a key, a number, an enum and between values.
  expect_mask_matches_every_token(
      *tok, schema(kPerson),
      "{\"name\": \"Al \xc3\xa9\xe2\x82\xac \\\"B\\\"\", \"age\": 4, \"tags\": [\"a\"]}",
      std::span(&eos, 1));
  // A string with a pattern, and a regex over the raw text.
  expect_mask_matches_every_token(
      *tok, schema(R"({"type": "string", "pattern": "^[A-Z][a-z]+ \\d{1,3}(\\n|\\\\)?$"})"),
      R"("Abc 12\n")", std::span(&eos, 1));
  expect_mask_matches_every_token(*tok, JsonGrammar::regex(R"(([01]\d|2[0-3]):[0-5]\d \w+)"),
                                  "23:59 Ok", std::span(&eos, 1));
  // A grammar's rule stacks.
  expect_mask_matches_every_token(*tok, JsonGrammar::grammar(R"g(
root ::= expr
expr ::= term ([+*] term)*
term ::= [0-9]+ | "(" expr ")" | "f(" expr ("," " "? expr)* ")"
)g"),
                                  "f(1, (2+3))*40", std::span(&eos, 1));
  // A JSON grammar in GBNF: string, number and ws are copied into the recursive rules, whose
  // DFAs then decide most tokens alone inside strings; calls and rule ends are walked.
  expect_mask_matches_every_token(*tok, JsonGrammar::grammar(R"g(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ([0-9] | [1-9] [0-9]*) ("." [0-9]+)?
ws     ::= [ \t\n]*
)g"),
                                  R"({"a b": [{"c": "d\"e f"}, -1.5, true], "g": "h"})",
                                  std::span(&eos, 1));
  // Two parses at once, each taking its own words in its own rule.
  expect_mask_matches_every_token(
      *tok,
      JsonGrammar::grammar(
          "root ::= a | b\na ::= \"hello world\" (\",\" a)?\nb ::= \"hello there\" (\";\" b)?"),
      "hello there;hello there", std::span(&eos, 1));
  // Masks of regex and grammar states are reused: here states recur.
  expect_mask_matches_every_token(
      *tok,
      JsonGrammar::grammar("root ::= item (\", \" item)*\nitem ::= [a-c]+ | \"<\" item \">\""),
      "ab, <ab>, ab, <<c>>", std::span(&eos, 1));
  // "ab" and "abcd" end in the same state.
  expect_mask_matches_every_token(*tok, JsonGrammar::regex("(ab|cd)+!"), "abcdab!",
                                  std::span(&eos, 1));
}

// The share of a speculative draft worth running: the tokens the grammar allows one after
// another, up to one that ends the generation.
TEST(TokenMasker, GrammaticalPrefixIsWhatTheMasksWouldAllowInTurn) {
  tokenizers::CharTokenizer tok("abc");
  const int32_t a = 0, b = 1, c = 2;
  infer::TokenMasker masker(tok, {});
  const JsonMatcher m(JsonGrammar::regex("(ab)+c"));
  const std::vector<int32_t> draft = {a, b, a, b, c, a};
  EXPECT_EQ(masker.grammatical_prefix(m, draft), 5) << "'c' ends it: nothing may follow";
  EXPECT_EQ(masker.grammatical_prefix(m, std::vector<int32_t>{a, a, b}), 1);
  EXPECT_EQ(masker.grammatical_prefix(m, std::vector<int32_t>{b}), 0);
  EXPECT_EQ(masker.grammatical_prefix(m, std::vector<int32_t>{a, 7}), 1)
      << "outside the vocabulary";
  EXPECT_EQ(masker.grammatical_prefix(m, std::vector<int32_t>{}), 0);
  JsonMatcher after_ab = m;
  ASSERT_TRUE(after_ab.advance("ab"));
  EXPECT_EQ(masker.grammatical_prefix(after_ab, std::vector<int32_t>{c}), 1);
  EXPECT_EQ(masker.grammatical_prefix(m, draft), 5) << "the matcher itself is not moved";
}

}  // namespace
}  // namespace tessera

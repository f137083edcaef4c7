// JSON Schema -> JsonGrammar nodes (see structured_output.h for what is supported).
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/infer/structured_output.h"

namespace tessera::infer {

using Json = nlohmann::json;

JsonGrammar::JsonGrammar() {
  auto add = [&](Node n) { nodes_.push_back(std::move(n)); };
  add({.kind = Kind::Any});
  add({.kind = Kind::Object, .additional = kAny});
  add({.kind = Kind::Array, .items = kAny});
  add({.kind = Kind::String});
  add({.kind = Kind::Number});
  add({.kind = Kind::Literals, .literals = {"true", "false"}});
  add({.kind = Kind::Literals, .literals = {"null"}});
}

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->root_ = kAnyObject;
  return g;
}

namespace {

// A number with bounds is written with at most this many decimals.
constexpr int32_t kBoundedNumberDecimals = 6;

// A JSON Schema format OpenAI's structured outputs enforce: its strings as a whole-text regular
// expression, and their most characters (-1: no limit). Each is written as strict validators
// read it (Ajv's full formats, Python's date.fromisoformat), so what it generates passes them:
// real calendar dates (no February 30, February 29 in leap years only, no year 0), no leap
// second (validators accept 23:59:60 only at the end of a UTC day, if at all), hostnames of at
// most 253 characters.
struct Format {
  std::string regex;
  int64_t max_chars = -1;
};

const Format* enforced_format(const std::string& name) {
  static const std::map<std::string, Format> kFormats = [] {
    const std::string year = R"(([1-9]\d{3}|0[1-9]\d\d|00[1-9]\d|000[1-9]))";
    const std::string leap_year =
        R"((\d\d(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00))";
    const std::string month_day =
        R"(((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))";
    const std::string date = "(" + year + "-" + month_day + "|" + leap_year + "-02-29)";
    const std::string time =
        R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
    const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
    const std::string label = R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
    return std::map<std::string, Format>{
        {"date", {date}},
        {"time", {time}},
        {"date-time", {date + "T" + time}},
        {"email",
         {R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)" + label +
          R"((\.)" + label + ")+"}},
        {"hostname", {label + R"((\.)" + label + ")*", 253}},
        {"ipv4", {"(" + octet + R"(\.){3})" + octet}},
        {"uuid",
         {R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"}},
    };
  }();
  const auto it = kFormats.find(name);
  return it == kFormats.end() ? nullptr : &it->second;
}

}  // namespace

// Compiles one schema; $refs resolve against the root document, each once (so recursive
// definitions become cycles between nodes).
class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(JsonGrammar& g, const Json& root) : g_(g), root_(root) {}

  int32_t compile(const Json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(where, "the schema false matches nothing");
      return JsonGrammar::kAny;
    }
    if (!s.is_object()) fail(where, "a schema must be an object or a boolean");
    check_keywords(s, where);
    if (s.contains("allOf")) return all_of(s, where);
    if (s.contains("$ref")) return ref(s, where);
    std::vector<int32_t> alternatives;
    if (s.contains("const")) {
      alternatives.push_back(add({.kind = Kind::Literals, .literals = {s["const"].dump()}}));
    } else if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty() || e.size() > 64)
        fail(where + "/enum", "expected an array of 1 to 64 values");
      JsonGrammar::Node n{.kind = Kind::Literals};
      for (const Json& v : e) n.literals.push_back(v.dump());
      alternatives.push_back(add(std::move(n)));
    } else {
      for (const char* key : {"anyOf", "oneOf"}) {
        if (!s.contains(key)) continue;
        const Json& list = s[key];
        if (!list.is_array() || list.empty())
          fail(where + "/" + key, "expected a non-empty array of schemas");
        // oneOf as anyOf: the grammar cannot exclude a value two branches both match.
        for (size_t i = 0; i < list.size(); ++i)
          alternatives.push_back(compile(list[i], where + "/" + key + "/" + std::to_string(i)));
      }
      if (alternatives.empty()) alternatives = typed(s, where);
    }
    if (s.value("nullable", false)) alternatives.push_back(JsonGrammar::kNull);
    if (alternatives.size() == 1) return alternatives[0];
    return add({.kind = Kind::Union, .alternatives = std::move(alternatives)});
  }

 private:
  using Kind = JsonGrammar::Kind;

  [[noreturn]] static void fail(const std::string& where, const std::string& what) {
    throw ValueError("[JsonGrammar] " + what + " at " + "#" + where);
  }

  static void check_keywords(const Json& s, const std::string& where) {
    static const std::set<std::string> supported{"type",
                                                 "properties",
                                                 "required",
                                                 "additionalProperties",
                                                 "items",
                                                 "prefixItems",
                                                 "additionalItems",
                                                 "uniqueItems",
                                                 "allOf",
                                                 "minItems",
                                                 "maxItems",
                                                 "minLength",
                                                 "maxLength",
                                                 "enum",
                                                 "const",
                                                 "anyOf",
                                                 "oneOf",
                                                 "$ref",
                                                 "$defs",
                                                 "definitions",
                                                 "nullable",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "exclusiveMaximum",
                                                 "multipleOf",
                                                 "minProperties",
                                                 "maxProperties",
                                                 "pattern",
                                                 "format"};
    for (const auto& [key, value] : s.items())
      if (!supported.contains(key) && !annotation(key))
        fail(where, "unsupported JSON Schema keyword '" + key + "'");
  }

  // A keyword that says nothing about which values are valid.
  static bool annotation(const std::string& key) {
    static const std::set<std::string> annotations{
        "title",    "description", "default",  "examples",  "$schema",          "$id",
        "$comment", "deprecated",  "readOnly", "writeOnly", "contentMediaType", "contentEncoding"};
    return annotations.contains(key);
  }

  int32_t add(JsonGrammar::Node n) {
    g_.nodes_.push_back(std::move(n));
    return static_cast<int32_t>(g_.nodes_.size() - 1);
  }

  // allOf of one schema (older generators wrap a $ref so to describe it), or of object schemas
  // merged into one (OpenAPI's composition): the union of their properties, each defined once or
  // alike, and of their required ones. Members with additionalProperties or other keywords would
  // need the grammar of an intersection: refused.
  int32_t all_of(const Json& s, const std::string& where) {
    const Json& list = s["allOf"];
    const std::string at = where + "/allOf";
    if (!list.is_array() || list.empty()) fail(at, "expected a non-empty array of schemas");
    bool alone = true;
    for (const auto& [key, value] : s.items())
      alone &= key == "allOf" || key == "$defs" || key == "definitions" || annotation(key);
    if (list.size() == 1 && alone) return compile(list[0], at + "/0");
    Json merged = {{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()}};
    auto merge = [&](const Json& part, const std::string& part_at) {
      for (const auto& [key, value] : part.items()) {
        if (key == "properties" && value.is_object()) {
          for (const auto& [name, sub] : value.items())
            if (const auto it = merged["properties"].find(name);
                it != merged["properties"].end() && *it != sub)
              fail(part_at + "/properties/" + name,
                   "a property of allOf defined differently in two of its schemas");
            else
              merged["properties"][name] = sub;
        } else if (key == "required" && value.is_array()) {
          for (const Json& r : value) merged["required"].push_back(r);
        } else if (!(key == "type" && value == "object") && key != "allOf" && key != "$defs" &&
                   key != "definitions" && !annotation(key) &&
                   !(key == "additionalProperties" && value == true)) {
          fail(part_at,
               "allOf of several schemas merges object schemas of properties and "
               "required only, got '" +
                   key + "'");
        }
      }
    };
    merge(s, where);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string part_at = at + "/" + std::to_string(i);
      const Json& part = resolved(list[i], part_at);
      if (!part.is_object()) fail(part_at, "expected an object schema");
      if (part.contains("allOf")) fail(part_at, "expected no allOf inside allOf");
      merge(part, part_at);
    }
    return compile(merged, where);
  }

  // s, or what its $ref (and theirs) names; a $ref may have only annotations beside it.
  const Json& resolved(const Json& s, const std::string& where) const {
    const Json* at = &s;
    for (int hops = 0; at->is_object() && at->contains("$ref"); ++hops) {
      for (const auto& [key, value] : at->items())
        if (key != "$ref" && !annotation(key))
          fail(where, "expected only annotations beside $ref in allOf, got '" + key + "'");
      if (hops == 32) fail(where + "/$ref", "expected fewer than 32 references in a chain");
      at = &referenced((*at)["$ref"], where);
    }
    return *at;
  }

  // The schema a $ref names: a pointer into this schema (#/...).
  const Json& referenced(const Json& r, const std::string& where) const {
    if (!r.is_string()) fail(where + "/$ref", "expected a string");
    const std::string path = r.get<std::string>();
    if (!path.starts_with("#"))
      fail(where + "/$ref", "expected a reference into this schema (#/...), got '" + path + "'");
    try {
      return root_.at(Json::json_pointer(path.substr(1)));
    } catch (const Json::exception&) {
      fail(where + "/$ref", "'" + path + "' names nothing in the schema");
    }
  }

  int32_t ref(const Json& s, const std::string& where) {
    const Json& r = s["$ref"];
    if (r.is_string())
      if (auto it = refs_.find(r.get<std::string>()); it != refs_.end()) return it->second;
    const Json& target = referenced(r, where);
    const std::string path = r.get<std::string>();
    // A placeholder union of one, filled once the target compiled: a cycle back to path finds it.
    const int32_t slot = add({.kind = Kind::Union});
    refs_[path] = slot;
    const int32_t target_node = compile(target, path.substr(1));
    g_.nodes_[static_cast<size_t>(slot)].alternatives = {target_node};
    return slot;
  }

  std::vector<int32_t> typed(const Json& s, const std::string& where) {
    std::vector<std::string> types;
    if (const auto t = s.find("type"); t != s.end()) {
      if (t->is_string())
        types.push_back(t->get<std::string>());
      else if (t->is_array() && !t->empty())
        for (const Json& x : *t) {
          if (!x.is_string()) fail(where + "/type", "expected type names");
          types.push_back(x.get<std::string>());
        }
      else
        fail(where + "/type", "expected a type name or a non-empty list of them");
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("required")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
               known_format(s)) {
      types = {"string"};
    } else if (has_bounds(s)) {  // integers in the range: a sound subset of what it allows
      types = {"integer"};
    } else {
      return {JsonGrammar::kAny};
    }
    std::vector<int32_t> out;
    for (const std::string& t : types) {
      if (t == "object")
        out.push_back(object(s, where));
      else if (t == "array")
        out.push_back(array(s, where));
      else if (t == "string")
        out.push_back(string(s, where));
      else if (t == "number" && has_bounds(s))
        out.push_back(ranged(s, where, kBoundedNumberDecimals));
      else if (t == "number")
        out.push_back(JsonGrammar::kNumber);
      else if (t == "integer")
        out.push_back(ranged(s, where, 0));
      else if (t == "boolean")
        out.push_back(JsonGrammar::kBoolean);
      else if (t == "null")
        out.push_back(JsonGrammar::kNull);
      else
        fail(where + "/type", "unknown type '" + t + "'");
    }
    return out;
  }

  static std::pair<int64_t, int64_t> bounds(const Json& s, const char* min, const char* max,
                                            const std::string& where) {
    auto get = [&](const char* key, int64_t fallback) {
      const auto it = s.find(key);
      if (it == s.end()) return fallback;
      if (!it->is_number_integer() || it->get<int64_t>() < 0)
        fail(where + "/" + key, "expected a non-negative integer");
      return it->get<int64_t>();
    };
    const int64_t lo = get(min, 0), hi = get(max, -1);
    if (hi >= 0 && hi < lo) fail(where, std::string(max) + " is below " + min);
    return {lo, hi};
  }

  static bool known_format(const Json& s) {
    const auto f = s.find("format");
    return f != s.end() && f->is_string() && enforced_format(f->get<std::string>()) != nullptr;
  }

  static bool has_bounds(const Json& s) {
    return s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
           s.contains("exclusiveMaximum") || s.contains("multipleOf");
  }

  // v x 10^decimals rounded up or down, clamped to +-10^18: exact, from v's shortest decimal text
  // (0.1 x 10^6 in doubles would be 100000.0000000000055, whose ceiling is one too many).
  static int64_t scaled(const Json& v, int32_t decimals, bool up) {
    constexpr int64_t kFar = 1000000000000000000;
    const std::string text = v.dump();  // -?digits(.digits)?([eE][-+]?digits)?
    const bool negative = text[0] == '-';
    const size_t e = text.find_first_of("eE");
    std::string digits = text.substr(negative, e - negative);
    int64_t exponent = decimals + (e == std::string::npos ? 0 : std::stoll(text.substr(e + 1)));
    if (const size_t dot = digits.find('.'); dot != std::string::npos) {
      exponent -= static_cast<int64_t>(digits.size() - dot - 1);
      digits.erase(dot, 1);
    }
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
    uint64_t magnitude = 0;
    bool inexact = false;  // digits were dropped below the unit
    if (static_cast<int64_t>(digits.size()) + exponent > 18) {
      magnitude = kFar;
    } else {
      const int64_t kept = std::max<int64_t>(0, static_cast<int64_t>(digits.size()) + exponent);
      for (int64_t k = 0; k < static_cast<int64_t>(digits.size()); ++k)
        if (k < kept)
          magnitude = magnitude * 10 + static_cast<uint64_t>(digits[k] - '0');
        else
          inexact |= digits[k] != '0';
      for (int64_t k = static_cast<int64_t>(digits.size()); k < kept; ++k) magnitude *= 10;
    }
    const bool away = inexact && up != negative;  // rounding away from zero
    const auto m = static_cast<int64_t>(std::min<uint64_t>(magnitude + away, kFar));
    return negative ? -m : m;
  }

  // A ranged number (integers: decimals 0) from the four bound keywords (draft 4's boolean
  // exclusive* too) and multipleOf, rounded inwards to units of 10^-decimals and to what the
  // matcher writes: integers of 18 characters (-99...9, 17 nines, to 10^18 - 1), other numbers of
  // 11 integer digits.
  int32_t ranged(const Json& s, const std::string& where, int32_t decimals) {
    const int64_t lowest = -99999999999999999;
    const int64_t highest = decimals == 0 ? 999999999999999999 : 99999999999999999;
    int64_t lo = lowest, hi = highest;
    auto bound = [&](const char* key, bool up) {
      const Json& v = s[key];
      if (!v.is_number()) fail(where + "/" + key, "expected a number");
      return scaled(v, decimals, up);
    };
    auto exclusive = [&](const char* key) {  // draft 4: a boolean beside minimum / maximum
      return s.contains(key) && s[key].is_boolean() && s[key].get<bool>();
    };
    if (s.contains("minimum"))
      lo = std::max(
          lo, exclusive("exclusiveMinimum") ? bound("minimum", false) + 1 : bound("minimum", true));
    if (s.contains("maximum"))
      hi = std::min(
          hi, exclusive("exclusiveMaximum") ? bound("maximum", true) - 1 : bound("maximum", false));
    if (s.contains("exclusiveMinimum") && !s["exclusiveMinimum"].is_boolean())
      lo = std::max(lo, bound("exclusiveMinimum", false) + 1);
    if (s.contains("exclusiveMaximum") && !s["exclusiveMaximum"].is_boolean())
      hi = std::min(hi, bound("exclusiveMaximum", true) - 1);
    int64_t multiple = 1;
    if (s.contains("multipleOf")) {
      // p units of 10^-6; the values on the 10^-decimals grid that are multiples of it are the
      // multiples of p / gcd(p, 10^(6 - decimals)) units of 10^-decimals.
      const Json& v = s["multipleOf"];
      const std::string at = where + "/multipleOf";
      if (!v.is_number() || v.get<double>() <= 0) fail(at, "expected a number above 0");
      const int64_t p = scaled(v, kBoundedNumberDecimals, false);
      if (p != scaled(v, kBoundedNumberDecimals, true) || p >= 1000000000000000000)
        fail(at, "expected at most " + std::to_string(kBoundedNumberDecimals) +
                     " decimals and at most 12 integer digits");
      int64_t grid = 1;
      for (int32_t k = decimals; k < kBoundedNumberDecimals; ++k) grid *= 10;
      multiple = p / std::gcd(p, grid);
    }
    const int64_t first = lo / multiple * multiple;  // the first multiple in [lo, hi]
    if (lo > hi || (first < lo ? first + multiple : first) > hi)
      fail(where, (decimals == 0 ? std::string("no integer of at most 18 characters")
                                 : "no number of at most 11 integer digits and " +
                                       std::to_string(decimals) + " decimals") +
                      (multiple > 1 ? " and a multiple of multipleOf" : "") +
                      " is within the bounds");
    return add({.kind = Kind::Ranged,
                .minimum = lo,
                .maximum = hi,
                .decimals = decimals,
                .multiple = multiple});
  }

  int32_t object(const Json& s, const std::string& where) {
    JsonGrammar::Node n{.kind = Kind::Object};
    std::map<std::string, int32_t> index;
    if (const auto props = s.find("properties"); props != s.end()) {
      if (!props->is_object()) fail(where + "/properties", "expected an object");
      if (props->size() > 64) fail(where + "/properties", "expected at most 64 properties");
      for (const auto& [key, value] : props->items()) {
        index[key] = static_cast<int32_t>(n.properties.size());
        n.properties.push_back({Json(key).dump(), -1});
      }
      size_t i = 0;
      for (const auto& [key, value] : props->items())
        n.properties[i++].value = compile(value, where + "/properties/" + key);
    }
    if (const auto req = s.find("required"); req != s.end()) {
      if (!req->is_array()) fail(where + "/required", "expected an array of property names");
      for (const Json& k : *req) {
        if (!k.is_string() || !index.contains(k.get<std::string>()))
          fail(where + "/required", k.dump() + " is not one of the properties");
        n.required |= uint64_t{1} << index[k.get<std::string>()];
      }
    }
    if (n.properties.empty()) {  // free keys; with listed properties, only those (strict mode)
      const auto extra = s.find("additionalProperties");
      if (extra == s.end() || (extra->is_boolean() && extra->get<bool>()))
        n.additional = JsonGrammar::kAny;
      else if (!extra->is_boolean())
        n.additional = compile(*extra, where + "/additionalProperties");
      // false: only {}
    }
    // minProperties / maxProperties: free keys may repeat (parsers keep one), so there at most 1
    // can be promised; listed ones are told apart.
    std::tie(n.min_count, n.max_count) = bounds(s, "minProperties", "maxProperties", where);
    const int64_t most = n.properties.empty() ? (n.additional < 0 ? 0 : 1)
                                              : static_cast<int64_t>(n.properties.size());
    if (n.min_count > most)
      fail(where + "/minProperties",
           n.properties.empty() ? "expected at most 1 without listed properties (free keys may "
                                  "repeat)"
                                : "expected at most the number of properties");
    if (n.max_count >= 0 && std::popcount(n.required) > n.max_count)
      fail(where + "/maxProperties", "expected at least the number of required properties");
    return add(std::move(n));
  }

  // Items: prefixItems then items (2020-12), or items as a list then additionalItems (draft 7);
  // false after a prefix closes the array there.
  int32_t array(const Json& s, const std::string& where) {
    auto [lo, hi] = bounds(s, "minItems", "maxItems", where);
    JsonGrammar::Node n{.kind = Kind::Array, .items = JsonGrammar::kAny};
    const char* prefix = s.contains("prefixItems") ? "prefixItems" : nullptr;
    const char* rest = "items";
    if (const auto items = s.find("items"); items != s.end() && items->is_array()) {
      if (prefix != nullptr) fail(where + "/items", "expected a schema after prefixItems");
      prefix = "items";
      rest = "additionalItems";
    }
    if (prefix != nullptr) {
      const Json& list = s[prefix];
      if (!list.is_array()) fail(where + "/" + prefix, "expected an array of schemas");
      for (size_t i = 0; i < list.size(); ++i)
        n.prefix_items.push_back(compile(list[i], where + "/" + prefix + "/" + std::to_string(i)));
    }
    if (const auto r = s.find(rest); r != s.end()) {
      if (r->is_boolean() && !r->get<bool>()) {  // no items beyond the prefix
        const auto most = static_cast<int64_t>(n.prefix_items.size());
        hi = hi < 0 ? most : std::min(hi, most);
        if (hi < lo) fail(where, std::string("minItems needs more items than ") + rest + " allows");
      } else {
        n.items = compile(*r, where + "/" + rest);
      }
    }
    if (const auto u = s.find("uniqueItems"); u != s.end() && *u != false) {
      // Distinct items are followed for a set of fixed values (enum, const, boolean, as
      // pydantic's Set[Literal[...]]): each item's candidates leave out those already written.
      if (*u != true) fail(where + "/uniqueItems", "expected a boolean");
      int32_t item = n.items;
      while (g_.node(item).kind == Kind::Union && g_.node(item).alternatives.size() == 1)
        item = g_.node(item).alternatives[0];  // a $ref to it
      if (!n.prefix_items.empty() || g_.node(item).kind != Kind::Literals)
        fail(where + "/uniqueItems",
             "expected items that are fixed values (enum, const, boolean) and no prefixItems");
      n.items = item;
      n.unique_items = true;
      const auto values = static_cast<int64_t>(g_.node(item).literals.size());
      hi = hi < 0 ? values : std::min(hi, values);
      if (hi < lo) fail(where, "minItems needs more distinct items than the values allowed");
    }
    n.min_count = lo;
    n.max_count = hi;
    return add(std::move(n));
  }

  int32_t string(const Json& s, const std::string& where) {
    auto [lo, hi] = bounds(s, "minLength", "maxLength", where);
    std::shared_ptr<const RegexDfa> pattern;
    if (const auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) fail(where + "/pattern", "expected a regular expression");
      try {
        pattern = RegexDfa::compile(p->get<std::string>(), RegexDfa::Match::Search);
      } catch (const ValueError& e) {
        fail(where + "/pattern", e.what());
      }
    }
    // A format, and lengths beside a pattern, are folded into its automaton, which then never
    // takes a character that leaves some bound unreachable. Lengths too long for that product are
    // counted by the matcher instead, where a bound may strand a text the pattern would let go on
    // (the request then fails with a clear error when it gets there).
    try {
      if (known_format(s)) {
        const Format& f = *enforced_format(s["format"].get<std::string>());
        auto format = RegexDfa::compile(f.regex, RegexDfa::Match::Full);
        if (f.max_chars >= 0) format = RegexDfa::with_length(*format, 0, f.max_chars);
        pattern = pattern ? RegexDfa::intersect(*pattern, *format) : std::move(format);
      }
      // At most a state per pattern state and count, and twice the classes (continuation bytes).
      const int64_t counts = (hi >= 0 ? hi : lo) + 1;
      if (pattern && (lo > 0 || hi >= 0) && counts <= RegexDfa::kMaxProductEntries &&
          pattern->num_states() * counts * 2 * pattern->num_classes() <=
              RegexDfa::kMaxProductEntries) {
        pattern = RegexDfa::with_length(*pattern, lo, hi);
        lo = 0;
        hi = -1;
      }
    } catch (const ValueError& e) {
      fail(where, std::string("its pattern, format and lengths together: ") + e.what());
    }
    if (lo == 0 && hi < 0 && !pattern) return JsonGrammar::kString;
    return add({.kind = Kind::String, .min_count = lo, .max_count = hi, .pattern = pattern});
  }

  JsonGrammar& g_;
  const Json& root_;
  std::map<std::string, int32_t> refs_;
};

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(const Json& schema) {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->root_ = JsonSchemaCompiler(*g, schema).compile(schema, "");
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema_text(std::string_view text) {
  const Json schema = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(!schema.is_discarded(), ValueError,
                "[JsonGrammar] expected a JSON Schema, got text that is not JSON");
  return from_schema(schema);
}

std::shared_ptr<const JsonGrammar> JsonGrammar::tool_calls(std::span<const Tool> tools,
                                                           bool parallel) {
  TESSERA_CHECK(!tools.empty(), ValueError, "[JsonGrammar] expected at least one tool");
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  auto add = [&](Node n) {
    g->nodes_.push_back(std::move(n));
    return static_cast<int32_t>(g->nodes_.size() - 1);
  };
  Node calls{.kind = Kind::Union};
  for (const Tool& t : tools) {
    int32_t parameters;
    try {  // each schema is its own document: its $refs resolve against it
      parameters = JsonSchemaCompiler(*g, *t.parameters).compile(*t.parameters, "");
    } catch (const ValueError& e) {
      throw ValueError(std::string(e.what()) + " of tool '" + t.name + "'");
    }
    const int32_t name = add({.kind = Kind::Literals, .literals = {Json(t.name).dump()}});
    calls.alternatives.push_back(
        add({.kind = Kind::Object,
             .properties = {{"\"name\"", name}, {"\"parameters\"", parameters}},
             .required = 0b11}));
  }
  const int32_t item = add(std::move(calls));
  g->root_ =
      add({.kind = Kind::Array, .items = item, .min_count = 1, .max_count = parallel ? -1 : 1});
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::choice(std::span<const std::string> texts) {
  TESSERA_CHECK(!texts.empty() && texts.size() <= 64, ValueError,
                "[JsonGrammar] expected 1 to 64 choices, got ", texts.size());
  std::set<std::string> seen;
  for (const std::string& t : texts)
    TESSERA_CHECK(!t.empty() && seen.insert(t).second, ValueError,
                  "[JsonGrammar] expected distinct non-empty choices, got '", t,
                  "' twice or empty");
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->nodes_.push_back({.kind = Kind::Literals, .literals = {texts.begin(), texts.end()}});
  g->root_ = static_cast<int32_t>(g->nodes_.size() - 1);
  g->raw_text_ = true;
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::grammar(std::string_view gbnf) {
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->nodes_.push_back({.kind = Kind::Rules, .rules = CfgGrammar::from_gbnf(gbnf)});
  g->root_ = static_cast<int32_t>(g->nodes_.size() - 1);
  g->raw_text_ = true;
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::without_whitespace(
    std::shared_ptr<const JsonGrammar> grammar) {
  TESSERA_CHECK(grammar != nullptr, ValueError, "[JsonGrammar] expected a grammar, got null");
  if (grammar->raw_text_ || grammar->max_whitespace_ == 0) return grammar;
  auto g = std::make_shared<JsonGrammar>(*grammar);
  g->max_whitespace_ = 0;
  return g;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::regex(std::string_view pattern) {
  auto dfa = RegexDfa::compile(pattern, RegexDfa::Match::Full);
  TESSERA_CHECK(!dfa->final(dfa->start()), ValueError, "[JsonGrammar] the regex '", pattern,
                "' matches only the empty text");
  auto g = std::shared_ptr<JsonGrammar>(new JsonGrammar());
  g->nodes_.push_back({.kind = Kind::String, .pattern = std::move(dfa)});
  g->root_ = static_cast<int32_t>(g->nodes_.size() - 1);
  g->raw_text_ = true;
  return g;
}

}  // namespace tessera::infer

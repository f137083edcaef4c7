#pragma once
// Structured output: generation constrained to JSON, any object (OpenAI's response_format
// json_object) or what a JSON Schema allows (json_schema), as vLLM does through xgrammar, or to
// a choice of texts, a regular expression (regex.h) or a GBNF grammar (cfg_grammar.h). Each
// compiles into a JsonGrammar; a JsonMatcher follows a generation's bytes through it (a
// byte-level pushdown recognizer, nondeterministic where the schema has anyOf or the grammar is
// ambiguous); a TokenMasker holds the vocabulary as a byte trie and finds, each step, every token
// whose bytes keep the matcher inside the grammar, pruning a whole subtree at the first byte that
// leaves it.
//
//   auto grammar = infer::JsonGrammar::from_schema(nlohmann::json::parse(R"({"type": "object",
//       "properties": {"name": {"type": "string"}}, "required": ["name"]})"));
//   infer::GenerationParams p;
//   p.json_grammar = grammar;  // the engine masks every step and stops when the value closes
//
// Schemas: type (a name or a list), properties, required, additionalProperties, items,
// prefixItems (tuples; also draft 7's items as a list with additionalItems), minItems, maxItems,
// minProperties, maxProperties, uniqueItems (of fixed values: enum, const, boolean),
// minLength, maxLength, enum, const, anyOf / oneOf, allOf of one schema (with nothing beside it
// but annotations) or of object schemas (merged: their properties, each defined once or alike,
// and required ones), $ref into "#/$defs/..." or
// "#/definitions/..." (recursion allowed), nullable, minimum / maximum / exclusiveMinimum /
// exclusiveMaximum and multipleOf on integers and numbers (a digit is taken only if some value in
// range can still follow; a number with either is written without an exponent and with at most
// 6 decimals, its bounds rounded inwards to them, multipleOf exact as JSON Schema defines it,
// which validators dividing doubles may not agree with for fractions), and pattern on strings (a
// RegexDfa that follows the string's value, its escapes decoded; the value is written with short
// escapes and \u00XX only for control characters), and the formats OpenAI's structured outputs
// enforce (date, time, date-time, email, hostname, ipv4, uuid: a regular expression each,
// intersected with a pattern beside it; lengths beside either are counted in the same automaton, so
// no bound strands a value). Annotations (title, description, default, examples, other formats,
// $schema, $id, $comment, ...) are ignored, as JSON Schema's validation does by default; any other
// keyword (not, if, patternProperties, other allOfs, ...) is a ValueError naming it and its place,
// rather than output that might not validate. What the grammar generates always validates: objects
// hold only the listed properties (each at most once, the required ones before the object closes:
// OpenAI's strict mode, additionalProperties false) unless there are none (then any keys, with
// additionalProperties' schema); whitespace between tokens is allowed in runs of at most 16 bytes
// (none without_whitespace()), so a model cannot pad forever; numbers have at most 32 characters
// and 2 exponent digits (they stay within a double's range, which some parsers insist on), integers
// at most 18 characters (they fit int64), numbers with bounds at most 11 integer digits; strings
// are valid UTF-8 (a byte-level token may hold part of a character: the next bytes must complete
// it) without \u escapes of surrogates, so strict parsers take every output. The vocabulary must
// spell every byte the grammar may need (as byte-level and byte-fallback tokenizers do): a
// character vocabulary without "_" cannot finish a property named "a_b", and such a request fails
// (ValueError from the engine) when it gets there.
#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/infer/cfg_grammar.h"
#include "tessera/infer/regex.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::infer {

class JsonGrammar {
 public:
  enum class Kind : uint8_t { Any, Object, Array, String, Number, Ranged, Literals, Union, Rules };
  struct Property {
    std::string key;  // its JSON text with the quotes: "\"name\""
    int32_t value;    // node
  };
  struct Node {
    Kind kind = Kind::Any;
    std::vector<Property> properties{};     // Object: at most 64
    uint64_t required = 0;                  // Object: bits of properties
    int32_t additional = -1;                // Object without properties: the values' node
    int32_t items = -1;                     // Array: the items after prefix_items
    std::vector<int32_t> prefix_items{};    // Array: its first items' nodes (prefixItems)
    bool unique_items = false;              // Array: items are distinct literals of `items`
    // Array items / String characters / Object properties; -1: unbounded
    int64_t min_count = 0, max_count = -1;
    // Ranged: a multiple of `multiple` in [minimum, maximum] (inclusive), in units of
    // 10^-decimals, written with at most `decimals` fraction digits and no exponent: an integer
    // (decimals 0) or a number with bounds or multipleOf.
    int64_t minimum = INT64_MIN, maximum = INT64_MAX;
    int32_t decimals = 0;
    int64_t multiple = 1;
    std::vector<std::string> literals{};    // Literals: JSON texts (enum, const, true, null)
    std::vector<int32_t> alternatives{};    // Union
    // String: what its value must match (JSON Schema's pattern and format, with the lengths
    // folded in; min/max_count then unbounded), or, at a raw_text() root, the whole text (regex()).
    std::shared_ptr<const RegexDfa> pattern{};
    std::shared_ptr<const CfgGrammar> rules{};  // Rules: a GBNF grammar (grammar())
  };

  // Any JSON object (response_format {"type": "json_object"}).
  static std::shared_ptr<const JsonGrammar> any_object();
  // ValueError "[JsonGrammar] ..." naming an unsupported keyword or a malformed schema and where.
  static std::shared_ptr<const JsonGrammar> from_schema(const nlohmann::json& schema);
  // The same from the schema's JSON text; ValueError too for text that is not JSON.
  static std::shared_ptr<const JsonGrammar> from_schema_text(std::string_view text);
  // Function calls (OpenAI's tool_choice "required"): a JSON array of {"name": one of the tools'
  // names, "parameters": a value of that tool's schema}, one item or (parallel) at least one.
  // ValueError as from_schema, naming the tool.
  struct Tool {
    std::string name;
    const nlohmann::json* parameters;  // a schema
  };
  static std::shared_ptr<const JsonGrammar> tool_calls(std::span<const Tool> tools, bool parallel);
  // Exactly one of 1 to 64 distinct non-empty texts, as they are (vLLM's guided_choice; no JSON
  // quoting, no whitespace around). ValueError otherwise.
  static std::shared_ptr<const JsonGrammar> choice(std::span<const std::string> texts);
  // Text the whole of which matches a regular expression (vLLM's guided_regex; syntax in
  // regex.h), as it is: no JSON. ValueError for a pattern RegexDfa refuses or one that matches
  // only the empty text.
  static std::shared_ptr<const JsonGrammar> regex(std::string_view pattern);
  // Text the whole of which a GBNF grammar's root rule matches (vLLM's guided_grammar; syntax in
  // cfg_grammar.h), as it is. ValueError for a grammar CfgGrammar refuses.
  static std::shared_ptr<const JsonGrammar> grammar(std::string_view gbnf);
  // This grammar with no whitespace between JSON tokens (vLLM's disable_any_whitespace): the
  // compact text, which a model cannot pad. Raw-text roots have none to remove: returned as is.
  static std::shared_ptr<const JsonGrammar> without_whitespace(
      std::shared_ptr<const JsonGrammar> grammar);

  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }
  // The root is a choice among raw texts (choice()), a regex (regex()) or a grammar (grammar()),
  // not a JSON value.
  bool raw_text() const { return raw_text_; }
  // The longest run of whitespace between JSON tokens: 16 bytes, 0 without_whitespace().
  uint8_t max_whitespace() const { return max_whitespace_; }
  // Nodes every grammar has, for values of unconstrained JSON.
  static constexpr int32_t kAny = 0, kAnyObject = 1, kAnyArray = 2, kString = 3, kNumber = 4,
                           kBoolean = 5, kNull = 6;

 private:
  JsonGrammar();
  friend class JsonSchemaCompiler;
  std::vector<Node> nodes_;
  int32_t root_ = kAny;
  bool raw_text_ = false;
  uint8_t max_whitespace_ = 16;
};

// Where a generation stands in a grammar. Cheap to copy (a few small frames per alternative).
class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> grammar);
  // Consumes bytes if they keep the text inside the grammar; else returns false, unchanged.
  bool advance(std::string_view bytes);
  // The text so far is one complete value (end of text allowed here).
  bool accepting() const;
  // ... and no byte can follow it: the generation is over.
  bool terminated() const;
  // Every alternative is inside a string without a length bound, between characters, where any
  // whole UTF-8 characters but a quote, a backslash or a control byte keep it.
  bool in_free_string() const;
  // Inside a regex() root's text, or in a grammar's last rule when it calls none: its DFA, and
  // its state into `state` (the masker then walks the DFA alone); else null.
  const RegexDfa* only_dfa(int32_t& state) const;
  // For a regex() or grammar() root, whose states recur as the text goes on: the state as bytes
  // into key (equal keys, equal masks) and true; else false.
  bool state_key(std::string& key) const;
  const std::shared_ptr<const JsonGrammar>& grammar() const { return grammar_; }
  // For a grammar() root: each unfinished thread's top rule and its DFA state into tops, and
  // true; else false.
  bool rule_tops(std::vector<std::pair<int32_t, int32_t>>& tops) const;

  // Internal state, public for the token masker.
  struct Frame {
    int32_t node = 0;
    uint8_t kind = 0;   // FrameKind (json_matcher.cpp)
    uint8_t state = 0;  // kind's state
    uint8_t is_key = 0;
    uint8_t negative = 0;  // number: after a '-'
    // array items, string characters, object free keys, literal or number position, rule
    uint32_t count = 0;
    // object: properties seen; literals: candidates left; number: exponent digits, or a ranged
    // one's magnitude so far in units of 10^-decimals; string: the range of its next UTF-8
    // continuation byte, or in \u whether the first digit was a D
    uint64_t bits = 0;
    // object: the node of the value after the key; string: UTF-8 bytes due; ranged number:
    // fraction digits so far
    int32_t pending = -1;
    int32_t dfa = 0;  // string with a pattern, grammar rule: its DFA's state after the text so far
    bool operator==(const Frame&) const = default;
  };
  // One alternative's stack: frames [begin, end) of frames_, its trailing-whitespace run.
  struct Thread {
    uint32_t begin = 0, end = 0;
    uint8_t whitespace = 0;
  };
  // This state after byte c into out (whose buffers it reuses); false if no alternative takes it.
  bool step_into(uint8_t c, JsonMatcher& out) const;

 private:
  void push_thread(std::span<const Frame> frames, uint8_t whitespace);
  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<Frame> frames_;
  std::vector<Thread> threads_;
  friend class JsonStepper;
};

// The vocabulary of a tokenizer as a byte trie, for masks over it.
class TokenMasker {
 public:
  // Tokens in `excluded` (BOS, EOS: the engine decides about stop tokens) and tokens without
  // bytes are never allowed.
  TokenMasker(const tokenizers::Tokenizer& tokenizer, std::span<const int32_t> excluded);
  // allowed[t] = 1 where token t's bytes keep matcher inside its grammar, else 0
  // (allowed is resized to the vocabulary).
  void allowed_tokens(const JsonMatcher& matcher, std::vector<uint8_t>& allowed) const;
  // How many of tokens, in order, keep matcher inside its grammar (as allowed_tokens would allow
  // each after those before it), stopping after one that ends the generation: how much of a
  // speculative draft is worth running.
  int64_t grammatical_prefix(const JsonMatcher& matcher, std::span<const int32_t> tokens) const;
  // Token t's bytes.
  std::string_view bytes(int32_t t) const { return token_bytes_[static_cast<size_t>(t)]; }
  int64_t vocab_size() const { return static_cast<int64_t>(token_bytes_.size()); }

 private:
  struct Trie {
    // Pre-order: node i's subtree is [i, subtree_end[i]); its byte leads from its parent.
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<uint32_t> subtree_end, tokens_begin, tokens_end;  // into token_order
    std::vector<int32_t> token_order;
    uint16_t max_depth = 0;
    void build(const std::vector<std::string>& bytes, const std::vector<int32_t>& ids);
  };
  // Marks the tokens of every node i for which step(i) is true, each step going on from the
  // state its parent's left at depth - 1; a subtree is skipped at the first false.
  template <class Step>
  static void walk(const Trie& trie, std::vector<uint8_t>& allowed, Step&& step);
  std::vector<std::string> token_bytes_;
  // String-content tokens (whole UTF-8 characters, no quote, backslash or control byte) are
  // allowed wholesale inside a string without a length bound: only the others are walked there.
  std::vector<uint8_t> plain_;
  Trie all_, special_;
  void compute(const JsonMatcher& matcher, std::vector<uint8_t>& allowed) const;
  // Walks of the whole matcher: scratch_[0] set to it, then one step per trie node.
  void start_matcher_walk(const JsonMatcher& matcher) const;
  bool matcher_step(const Trie& trie, size_t node) const;
  // Marks the tokens whose bytes dfa takes from state. With `open`, a node whose parent's state
  // may end the rule or call another is recorded there (pre-order) and its subtree not walked.
  void walk_dfa(const RegexDfa& dfa, int32_t state, std::vector<uint8_t>& allowed,
                std::vector<uint32_t>* open) const;
  // Walks the whole matcher from the root to the nodes of open (sorted) and through their
  // subtrees, marking what it takes.
  void walk_open(const JsonMatcher& matcher, std::span<const uint32_t> open,
                 std::vector<uint8_t>& allowed) const;
  // One state per trie depth: not thread-safe.
  mutable std::vector<JsonMatcher> scratch_;
  mutable std::vector<int32_t> regex_scratch_;
  // What a grammar rule's DFA decides alone from one of its states, whatever the rules below it
  // on the stack (xgrammar's context-independent tokens): the tokens it takes whole, and the
  // trie nodes from which it cannot (a call or the rule's end comes first), left to the whole
  // matcher. The latest kMaxRuleMasks, oldest first.
  struct RuleMask {
    std::shared_ptr<const JsonGrammar> grammar;
    int32_t rule, state;
    std::vector<uint8_t> taken;
    std::vector<uint32_t> open;  // pre-order
  };
  const RuleMask& rule_mask(const std::shared_ptr<const JsonGrammar>& grammar, int32_t rule,
                            int32_t state) const;
  mutable std::vector<RuleMask> rule_masks_;
  mutable std::vector<std::pair<int32_t, int32_t>> tops_;
  mutable std::vector<uint32_t> open_;
  // The masks of the latest regex and grammar states (JsonMatcher::state_key), oldest first;
  // the grammar is held, so its address cannot be reused by another while it is here.
  struct CachedMask {
    std::shared_ptr<const JsonGrammar> grammar;
    std::string key;
    std::vector<uint8_t> allowed;
  };
  mutable std::vector<CachedMask> cached_;
  mutable std::string key_;
};

}  // namespace tessera::infer

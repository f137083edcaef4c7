// Structured output fields of a request: OpenAI's response_format and vLLM's structured_outputs,
// guided_json, guided_regex, guided_grammar and guided_choice, each into the engine's
// JsonGrammar.
#include "serve/openai_structured.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace tessera::serve {

using namespace detail;

namespace {

// A JSON Schema given as an object or as JSON text.
std::shared_ptr<const infer::JsonGrammar> schema_grammar(const Json& schema, const char* param) {
  return invalid_as_400(param, "", [&] {
    return schema.is_string() ? infer::JsonGrammar::from_schema_text(schema.get<std::string>())
                              : infer::JsonGrammar::from_schema(schema);
  });
}

std::shared_ptr<const infer::JsonGrammar> choice_grammar(const Json& choices, const char* param) {
  if (!choices.is_array() ||
      !std::all_of(choices.begin(), choices.end(), [](const Json& c) { return c.is_string(); }))
    throw bad(param, std::string("'") + param + "' must be an array of strings");
  return invalid_as_400(param, "", [&] {
    return infer::JsonGrammar::choice(choices.get<std::vector<std::string>>());
  });
}

// A grammar compiled from a string field: a regular expression or a GBNF grammar (`what`).
using TextCompiler = std::shared_ptr<const infer::JsonGrammar> (*)(std::string_view);
std::shared_ptr<const infer::JsonGrammar> text_grammar(const Json& text, const char* param,
                                                       const char* what, TextCompiler compile) {
  if (!text.is_string())
    throw bad(param, std::string("'") + param + "' must be " + what + " (a string)");
  return invalid_as_400(param, "", [&] { return compile(text.get<std::string>()); });
}
std::shared_ptr<const infer::JsonGrammar> regex_grammar(const Json& pattern, const char* param) {
  return text_grammar(pattern, param, "a regular expression", &infer::JsonGrammar::regex);
}
std::shared_ptr<const infer::JsonGrammar> gbnf_grammar(const Json& text, const char* param) {
  return text_grammar(text, param, "a GBNF grammar", &infer::JsonGrammar::grammar);
}

// {"type": "text"}: none; "json_object": any object; "json_schema": its "schema".
std::shared_ptr<const infer::JsonGrammar> response_format(const Json& rf) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw bad("response_format", "'response_format' must be an object with a string 'type'");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") return infer::JsonGrammar::any_object();
  if (type != "json_schema")
    throw bad("response_format", "unknown response_format type '" + type + "'");
  const auto spec = rf.find("json_schema");
  if (spec == rf.end() || !spec->is_object() || !spec->contains("schema"))
    throw bad("response_format",
              "response_format json_schema must be {\"type\": \"json_schema\", \"json_schema\": "
              "{\"name\": ..., \"schema\": {...}}}");
  return schema_grammar((*spec)["schema"], "response_format");
}

// vLLM's StructuredOutputsParams as a request field: exactly one of json, regex, grammar, choice,
// json_object, and the options disable_any_whitespace (compact JSON) and disable_fallback (this
// server has one backend: nothing to fall back to).
std::shared_ptr<const infer::JsonGrammar> structured_outputs(const Json& so) {
  const char* param = "structured_outputs";
  if (!so.is_object()) throw bad(param, "'structured_outputs' must be an object");
  std::shared_ptr<const infer::JsonGrammar> g;
  bool compact = false;
  for (const auto& [key, value] : so.items()) {
    if (value.is_null() || (key == "json_object" && value == false)) continue;
    if (key == "disable_any_whitespace" || key == "disable_fallback") {
      if (!value.is_boolean()) throw bad(param, "structured_outputs." + key + " must be a boolean");
      compact |= key == "disable_any_whitespace" && value.get<bool>();
      continue;
    }
    if (g)
      throw bad(param,
                "'structured_outputs' takes one of json, regex, grammar, choice and json_object");
    if (key == "json")
      g = schema_grammar(value, param);
    else if (key == "regex")
      g = regex_grammar(value, param);
    else if (key == "grammar")
      g = gbnf_grammar(value, param);
    else if (key == "choice")
      g = choice_grammar(value, param);
    else if (key == "json_object" && value == true)
      g = infer::JsonGrammar::any_object();
    else
      throw bad(param, "structured_outputs." + key +
                           " is not supported (json, regex, grammar, choice and json_object are, "
                           "with disable_any_whitespace and disable_fallback)");
  }
  return compact && g ? infer::JsonGrammar::without_whitespace(g) : g;
}

}  // namespace

std::shared_ptr<const infer::JsonGrammar> output_grammar(const Fields& f) {
  std::shared_ptr<const infer::JsonGrammar> grammar;
  const char* from = nullptr;
  auto take = [&](const char* param, std::shared_ptr<const infer::JsonGrammar> g) {
    if (!g) return;
    if (grammar)
      throw bad(param,
                std::string("'") + param + "' and '" + from + "' cannot both constrain the output");
    grammar = std::move(g);
    from = param;
  };
  if (const Json* rf = f.get("response_format")) take("response_format", response_format(*rf));
  if (const Json* so = f.get("structured_outputs"))
    take("structured_outputs", structured_outputs(*so));
  if (const Json* gj = f.get("guided_json"))
    take("guided_json", schema_grammar(*gj, "guided_json"));
  if (const Json* gr = f.get("guided_regex"))
    take("guided_regex", regex_grammar(*gr, "guided_regex"));
  if (const Json* gg = f.get("guided_grammar"))
    take("guided_grammar", gbnf_grammar(*gg, "guided_grammar"));
  if (const Json* gc = f.get("guided_choice"))
    take("guided_choice", choice_grammar(*gc, "guided_choice"));
  return grammar;
}

}  // namespace tessera::serve

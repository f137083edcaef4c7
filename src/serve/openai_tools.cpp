// Chat tool calling: tools and tool_choice into the request's JSON grammar, the generated JSON
// back into OpenAI's tool_calls, and earlier tool calls of a conversation into prompt text.
#include <algorithm>
#include <random>
#include <regex>
#include <set>

#include "serve/openai_json.h"
#include "serve/openai_tools.h"
#include "tessera/infer/structured_output.h"

namespace tessera::serve {

using namespace detail;

namespace {

// A function without parameters takes none: {}.
const Json kNoParameters = {
    {"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}};

struct ParsedTool {
  std::string name;
  const Json* parameters;
};

std::vector<ParsedTool> parse_tool_list(const Json& tools) {
  if (!tools.is_array() || tools.empty())
    throw bad("tools", "'tools' must be a non-empty array of {\"type\": \"function\", ...}");
  static const std::regex name_re("[A-Za-z0-9_-]{1,64}");
  std::vector<ParsedTool> out;
  std::set<std::string> names;
  for (const Json& t : tools) {
    if (!t.is_object() || t.value("type", Json()) != "function" || !t.contains("function") ||
        !t["function"].is_object())
      throw bad("tools", "each tool must be {\"type\": \"function\", \"function\": {...}}");
    const Json& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() ||
        !std::regex_match(fn["name"].get<std::string>(), name_re))
      throw bad("tools", "a function's 'name' must be 1 to 64 letters, digits, '_' or '-'");
    const std::string name = fn["name"].get<std::string>();
    if (!names.insert(name).second) throw bad("tools", "two tools are named '" + name + "'");
    const auto params = fn.find("parameters");
    if (params != fn.end() && !params->is_object())
      throw bad("tools", "the 'parameters' of '" + name + "' must be a JSON Schema object");
    out.push_back({name, params == fn.end() ? &kNoParameters : &*params});
  }
  return out;
}

}  // namespace

void parse_tools(const Fields& f, const ModelLimits& limits, CompletionRequest& r) {
  const Json* tools = f.get("tools");
  const Json* choice = f.get("tool_choice");
  const bool parallel = f.boolean("parallel_tool_calls", true);
  if (!tools) {
    if (choice && *choice != "none")
      throw bad("tool_choice", "'tool_choice' needs 'tools' to choose from");
    return;
  }
  const std::vector<ParsedTool> list = parse_tool_list(*tools);
  const Json c = choice ? *choice : Json("auto");
  if (c == "none") return;
  if (c == "auto") {
    if (!limits.tool_call_parser)
      throw bad("tool_choice",
                "tool_choice \"auto\" (the default with tools) needs the server started with "
                "--enable-auto-tool-choice and a --tool-call-parser for the model's format: use "
                "\"required\", a named function or \"none\"");
    r.tool_choice = ToolChoice::Auto;  // the model writes its calls as its template taught it
    r.tool_format = *limits.tool_call_parser;
    return;
  }
  if (r.params.json_grammar)
    throw bad("tool_choice",
              "'tool_choice' and response_format (or structured_outputs, guided_json, "
              "guided_regex, guided_grammar, guided_choice) cannot both shape the output");
  if (c == "required") {
    std::vector<infer::JsonGrammar::Tool> grammar_tools;
    for (const ParsedTool& t : list) grammar_tools.push_back({t.name, t.parameters});
    r.params.json_grammar = invalid_as_400(
        "tools", "", [&] { return infer::JsonGrammar::tool_calls(grammar_tools, parallel); });
    r.tool_choice = ToolChoice::Required;
    return;
  }
  if (!c.is_object() || c.value("type", Json()) != "function" || !c.contains("function") ||
      !c["function"].is_object() || !c["function"].contains("name") ||
      !c["function"]["name"].is_string())
    throw bad("tool_choice",
              "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
              "\"function\", \"function\": {\"name\": ...}}");
  const std::string name = c["function"]["name"].get<std::string>();
  const auto it =
      std::find_if(list.begin(), list.end(), [&](const ParsedTool& t) { return t.name == name; });
  if (it == list.end()) throw bad("tool_choice", "no tool is named '" + name + "'");
  r.params.json_grammar =
      invalid_as_400("tools", "", [&] { return infer::JsonGrammar::from_schema(*it->parameters); });
  r.tool_choice = ToolChoice::Named;
  r.tool_name = name;
}

std::string assistant_tool_calls_text(const Json& tool_calls) {
  if (!tool_calls.is_array())
    throw bad("messages", "an assistant message's 'tool_calls' must be an array");
  Json calls = Json::array();
  for (const Json& call : tool_calls) {
    const Json* fn = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string() ||
        !fn->contains("arguments") || !(*fn)["arguments"].is_string())
      throw bad("messages",
                "each tool call must be {\"function\": {\"name\": ..., \"arguments\": \"...\"}}");
    const Json args = Json::parse((*fn)["arguments"].get<std::string>(), nullptr, false);
    if (args.is_discarded()) throw bad("messages", "a tool call's 'arguments' must be JSON text");
    calls.push_back({{"name", (*fn)["name"]}, {"parameters", args}});
  }
  return dump(calls);
}

std::string new_tool_call_id(ToolChoice choice, ToolCallFormat format) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const bool mistral = choice == ToolChoice::Auto && format == ToolCallFormat::Mistral;
  std::string id = mistral ? "" : "call_";
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[pick(rng)];
  return id;
}

namespace {

ToolCall new_call(const CompletionState& s, std::string name, std::string arguments, size_t index) {
  return {new_tool_call_id(s.tool_choice, s.tool_format), std::move(name), std::move(arguments),
          static_cast<int64_t>(index)};
}

}  // namespace

void extract_tool_calls(const CompletionState& s, Choice& c) {
  if (s.tool_choice == ToolChoice::Auto) {
    ToolCallSplit split = split_tool_calls(s.tool_format, c.text, /*finished=*/true);
    for (ParsedToolCall& call : split.calls)
      c.tool_calls.push_back(
          new_call(s, std::move(call.name), std::move(call.arguments), c.tool_calls.size()));
    c.called_tools = !c.tool_calls.empty();
    c.text = std::move(split.content);
    return;
  }
  if (s.tool_choice == ToolChoice::None || c.finish_reason != infer::FinishReason::Stop) return;
  const Json v = Json::parse(c.text, nullptr, false);
  if (v.is_discarded()) return;
  if (s.tool_choice == ToolChoice::Named) {
    c.tool_calls = {new_call(s, s.tool_name, c.text, 0)};  // as streamed
  } else {
    // The grammar's shape, unless a stop string cut the text into other JSON.
    const auto is_call = [](const Json& call) {
      return call.is_object() && call.contains("name") && call["name"].is_string() &&
             call.contains("parameters");
    };
    if (!v.is_array() || v.empty() || !std::all_of(v.begin(), v.end(), is_call)) return;
    for (const Json& call : v)
      c.tool_calls.push_back(new_call(s, call["name"].get<std::string>(), dump(call["parameters"]),
                                      c.tool_calls.size()));
    c.called_tools = true;
  }
  c.text.clear();
}

void ToolCallStream::advance(const CompletionState& s, Choice& c, bool finished) {
  text_ += c.text;
  ToolCallSplit split = split_tool_calls(s.tool_format, text_, finished);
  c.text = unsent(split.content, content_sent_);
  c.tool_calls.clear();
  for (; calls_sent_ < split.calls.size(); ++calls_sent_)
    c.tool_calls.push_back(new_call(s, std::move(split.calls[calls_sent_].name),
                                    std::move(split.calls[calls_sent_].arguments), calls_sent_));
  c.called_tools = c.called_tools || !c.tool_calls.empty();
}

}  // namespace tessera::serve

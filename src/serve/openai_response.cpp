// Response bodies: completions and chat completions, stream chunks, the usage event,
// /v1/models and errors (ApiError), with their logprobs in OpenAI's two shapes.
#include "serve/openai_json.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

using namespace detail;

namespace {

std::string object_name(Endpoint ep, bool chunk) {
  if (ep == Endpoint::Completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

Json finish_json(infer::FinishReason r) {
  if (r == infer::FinishReason::None) return nullptr;
  return std::string(infer::finish_reason_name(r));
}

Json usage_json(const CompletionState& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"total_tokens", s.prompt_tokens + s.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.cached_tokens}}}};
}

Json envelope(Endpoint ep, const CompletionState& s, bool chunk) {
  return {
      {"id", s.id}, {"object", object_name(ep, chunk)}, {"created", s.created}, {"model", s.model}};
}

Json bytes_json(const std::string& token) {
  Json b = Json::array();
  for (unsigned char c : token) b.push_back(c);
  return b;
}

// OpenAI's chat shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
Json chat_logprobs(const Choice& c) {
  Json content = Json::array();
  for (const LogprobEntry& e : c.logprobs) {
    Json top = Json::array();
    for (const auto& [token, lp] : e.top)
      top.push_back({{"token", token}, {"logprob", lp}, {"bytes", bytes_json(token)}});
    content.push_back({{"token", e.token},
                       {"logprob", e.logprob},
                       {"bytes", bytes_json(e.token)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// The legacy completions shape: parallel lists, top_logprobs as {token: logprob} dicts.
Json completion_logprobs(const Choice& c) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  int64_t offset = c.text_offset;
  for (const LogprobEntry& e : c.logprobs) {
    tokens.push_back(e.token);
    lps.push_back(e.none ? Json(nullptr) : Json(e.logprob));
    Json top = Json::object();
    for (const auto& [token, lp] : e.top) top[token] = lp;
    tops.push_back(e.none ? Json(nullptr) : top);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(e.token.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// A chat message's (or delta's) tool_calls; a stream of a named function's arguments sends its
// text as it comes, the call's id and name with the first chunk.
Json tool_calls_json(const CompletionState& s, const Choice& c, bool chunk, bool first) {
  Json calls = Json::array();
  if (chunk && s.tool_choice == ToolChoice::Named) {
    Json call = {{"index", 0}, {"function", {{"arguments", c.text}}}};
    if (first) {
      call["id"] = new_tool_call_id(s.tool_choice, s.tool_format);
      call["type"] = "function";
      call["function"]["name"] = s.tool_name;
    }
    calls.push_back(std::move(call));
    return calls;
  }
  for (const ToolCall& t : c.tool_calls) {
    Json call = {{"id", t.id},
                 {"type", "function"},
                 {"function", {{"name", t.name}, {"arguments", t.arguments}}}};
    if (chunk) call["index"] = t.index;
    calls.push_back(std::move(call));
  }
  return calls;
}

Json choice_json(Endpoint ep, const CompletionState& s, const Choice& c, bool chunk, bool first) {
  // OpenAI's finish reason when the model called tools of its own choice ("required", "auto").
  const bool ended = c.finish_reason == infer::FinishReason::Stop ||
                     c.finish_reason == infer::FinishReason::Length;
  Json j = {{"index", c.index},
            {"finish_reason",
             c.called_tools && ended ? Json("tool_calls") : finish_json(c.finish_reason)},
            {"token_ids", c.token_ids}};
  if (ep == Endpoint::Completions) {
    j["text"] = c.text;
    j["logprobs"] = s.logprobs ? completion_logprobs(c) : Json(nullptr);
    return j;
  }
  j["logprobs"] = s.logprobs ? chat_logprobs(c) : Json(nullptr);
  // A named function's stream chunks carry its arguments, not content.
  const bool named_chunk = chunk && s.tool_choice == ToolChoice::Named;
  const bool tools = !c.tool_calls.empty() || named_chunk;
  // A chunk of thinking alone carries no content; a message always says whether it thought.
  const bool no_content = named_chunk || ((tools || !c.reasoning.empty()) && c.text.empty());
  Json body = {{"content", no_content ? Json(nullptr) : Json(c.text)}};
  if (s.reasoning && (!chunk || !c.reasoning.empty()))
    body["reasoning_content"] = c.reasoning.empty() ? Json(nullptr) : Json(c.reasoning);
  if (tools) body["tool_calls"] = tool_calls_json(s, c, chunk, first);
  if (!chunk || first) body["role"] = "assistant";
  j[chunk ? "delta" : "message"] = std::move(body);
  return j;
}

}  // namespace

std::vector<LogprobEntry> logprob_entries(const std::vector<infer::TokenLogprob>& logprobs,
                                          const tokenizers::Tokenizer& tokenizer, int32_t prev) {
  std::vector<LogprobEntry> entries;
  for (const infer::TokenLogprob& t : logprobs) {
    LogprobEntry e{tokenizer.token_to_string(t.token, prev), t.logprob, {}};
    for (const auto& [id, lp] : t.top) e.top.emplace_back(tokenizer.token_to_string(id, prev), lp);
    entries.push_back(std::move(e));
    prev = t.token;
  }
  return entries;
}

void echo_prompt(CompletionState& s, const CompletionRequest& r,
                 const tokenizers::Tokenizer& tokenizer) {
  for (Choice& c : s.choices) {
    c.text = r.echo_text + c.text;
    if (!s.logprobs) continue;
    std::vector<LogprobEntry> prompt = {
        {.token = tokenizer.token_to_string(r.prompt.front(), -1), .top = {}, .none = true}};
    for (LogprobEntry& e : logprob_entries(c.prompt_logprobs, tokenizer, r.prompt.front()))
      prompt.push_back(std::move(e));
    c.logprobs.insert(c.logprobs.begin(), prompt.begin(), prompt.end());
  }
}

ApiError::ApiError(int status, std::string message, std::string param, std::string type,
                   std::string code)
    : status(status),
      message(std::move(message)),
      param(std::move(param)),
      type(std::move(type)),
      code(std::move(code)) {}

std::string error_json(const ApiError& e) {
  Json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
              {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}};
  return dump(Json{{"error", err}});
}

std::string response_json(Endpoint ep, const CompletionState& s) {
  Json choices = Json::array();
  for (const Choice& c : s.choices) choices.push_back(choice_json(ep, s, c, false, false));
  Json j = envelope(ep, s, false);
  j["choices"] = choices;
  j["usage"] = usage_json(s);
  return dump(j);
}

std::string stream_event(Endpoint ep, const CompletionState& s, size_t c, bool first) {
  Json j = envelope(ep, s, true);
  j["choices"] = Json::array({choice_json(ep, s, s.choices.at(c), true, first)});
  return "data: " + dump(j) + "\n\n";
}

std::string usage_event(Endpoint ep, const CompletionState& s) {
  Json j = envelope(ep, s, true);
  j["choices"] = Json::array();
  j["usage"] = usage_json(s);
  return "data: " + dump(j) + "\n\n";
}

std::string models_json(const std::vector<std::string>& names, const std::vector<LoraModule>& loras,
                        int64_t created, int64_t max_model_len) {
  Json data = Json::array();
  for (const std::string& name : names)
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "tessera"},
                    {"root", name},
                    {"parent", nullptr},
                    {"max_model_len", max_model_len}});
  for (const LoraModule& lora : loras)
    data.push_back({{"id", lora.name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "tessera"},
                    {"root", lora.path},
                    {"parent", names.front()},
                    {"max_model_len", max_model_len}});
  return dump(Json{{"object", "list"}, {"data", data}});
}

}  // namespace tessera::serve

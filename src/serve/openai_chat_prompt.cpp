// Chat requests' prompts: messages through the model's chat template (or the plain one) with
// vLLM's options, then tokenized as Hugging Face tokenizes a rendered chat.
#include "serve/openai_chat_prompt.h"

#include <string>
#include <vector>

#include "serve/openai_tools.h"
#include "tessera/tokenizers/chat_template.h"

namespace tessera::serve {

using namespace detail;

namespace {

std::string message_text(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string text;
    for (const Json& part : content) {
      // Compared as JSON: value("type", "") threw a JSON type_error (not an ApiError) when
      // "type" was not a string.
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
          !part.contains("text") || !part["text"].is_string())
        throw bad("messages", "message content parts must be {\"type\": \"text\", \"text\": ...}");
      text += part["text"].get<std::string>();
    }
    return text;
  }
  throw bad("messages",
            std::string("message content must be a string or an array, got ") + type_name(content));
}

// A message as a chat template reads it, as vLLM hands it over: content as text (content_text,
// or null when the message has none), an assistant's tool calls with their arguments parsed from
// JSON text into objects (checked by assistant_tool_calls_text), a tool message's tool_call_id
// and name.
Json template_message(const Json& m, Json content_text) {
  Json out = {{"role", m["role"]}, {"content", std::move(content_text)}};
  for (const char* key : {"tool_call_id", "name"})
    if (m.contains(key) && m[key].is_string()) out[key] = m[key];
  if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
    out["tool_calls"] = m["tool_calls"];
    for (Json& call : out["tool_calls"])
      call["function"]["arguments"] = Json::parse(call["function"]["arguments"].get<std::string>());
  }
  return out;
}

// What a request adds to its chat template's variables (vLLM's chat_template_kwargs, such as
// Qwen3's {"enable_thinking": false}): an object, without the variables the server sets.
const Json* template_kwargs(const Fields& f) {
  const Json* kw = f.get("chat_template_kwargs");
  if (!kw) return nullptr;
  if (!kw->is_object())
    throw bad("chat_template_kwargs",
              std::string("'chat_template_kwargs' must be an object, got ") + type_name(*kw));
  for (const char* reserved : {"messages", "tools"})
    if (kw->contains(reserved))
      throw bad("chat_template_kwargs", std::string("'chat_template_kwargs' cannot set '") +
                                            reserved + "': send it as the request's own field");
  return kw;
}

// vLLM's continue_final_message: the reply goes on writing the last message, an assistant's, so
// the prompt ends with its text, as Transformers' apply_chat_template cuts it (at the text's
// last occurrence, or the trimmed text's for templates that trim messages).
void cut_after_final_message(std::string& text, const Json& last) {
  if (last["role"] != "assistant")
    throw bad("continue_final_message",
              "'continue_final_message' continues the last message, which must be the "
              "assistant's, got a '" +
                  last["role"].get<std::string>() + "' message");
  std::string final_text =
      last.contains("content") && !last["content"].is_null() ? message_text(last["content"]) : "";
  size_t at = text.rfind(final_text);
  if (at == std::string::npos) {
    const size_t first = final_text.find_first_not_of(" \t\n\r");
    const size_t end = final_text.find_last_not_of(" \t\n\r");
    final_text = first == std::string::npos ? "" : final_text.substr(first, end - first + 1);
    at = text.rfind(final_text);
  }
  if (at == std::string::npos)
    throw bad("continue_final_message",
              "the chat template does not write the final message's text, so the reply cannot "
              "continue it");
  text.resize(at + final_text.size());
}

std::string chat_prompt(const Json& messages, const ModelLimits& limits, const ChatOptions& o) {
  if (!messages.is_array() || messages.empty())
    throw bad("messages", "'messages' must be a non-empty array");
  std::vector<tokenizers::ChatMessage> parsed;  // for the plain template
  Json msgs = Json::array();                    // for the model's own template
  for (const Json& m : messages) {
    // An assistant's earlier tool calls stand in for (or follow) its content.
    const bool calls = m.is_object() && m.contains("tool_calls") && !m["tool_calls"].is_null();
    const bool content = m.is_object() && m.contains("content") && !m["content"].is_null();
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || (!content && !calls))
      throw bad("messages", "each message must be an object with a string 'role' and 'content'");
    const std::string role = m["role"].get<std::string>();
    if (!tokenizers::is_chat_role(role))
      throw bad("messages", "unknown message role '" + role + "'");
    if (calls && role != "assistant")
      throw bad("messages", "only assistant messages carry 'tool_calls'");
    const std::string text = content ? message_text(m["content"]) : std::string();
    const std::string calls_text = calls ? assistant_tool_calls_text(m["tool_calls"]) : "";
    // The model's own template writes tool calls, tool results and the tools its own way.
    if (limits.chat_template)
      msgs.push_back(template_message(m, content ? Json(text) : Json(nullptr)));
    else
      parsed.push_back({role, text + calls_text});
  }
  std::string text;
  if (!limits.chat_template) {
    text = tokenizers::plain_chat_prompt(parsed, o.add_generation_prompt);
  } else {
    const ChatTemplate& t = *limits.chat_template;
    Json variables = {{"bos_token", t.bos_token},
                      {"eos_token", t.eos_token},
                      {"add_generation_prompt", o.add_generation_prompt}};
    if (o.kwargs) variables.update(*o.kwargs);
    variables["messages"] = std::move(msgs);
    if (o.tools) variables["tools"] = *o.tools;
    // raise_exception: the template refuses these messages.
    text = invalid_as_400("messages", "the chat template rejected the messages: ", [&] {
      return t.jinja.render(variables);
    });
  }
  if (o.continue_final_message) cut_after_final_message(text, messages.back());
  return text;
}

}  // namespace

ChatOptions chat_options(const Fields& f, bool with_tools) {
  ChatOptions o;
  o.tools = with_tools ? f.get("tools") : nullptr;
  o.kwargs = template_kwargs(f);
  o.add_generation_prompt = f.boolean("add_generation_prompt", true);
  o.continue_final_message = f.boolean("continue_final_message", false);
  if (o.add_generation_prompt && o.continue_final_message)
    throw bad("continue_final_message",
              "'continue_final_message' needs 'add_generation_prompt': false (the reply continues "
              "the last message instead of starting a new one)");
  return o;
}

// A chat's prompt tokens: see ChatTemplate for how BOS is handled.
std::vector<int32_t> chat_tokens(const Json& messages, const tokenizers::Tokenizer& tok,
                                 const ModelLimits& limits, const ChatOptions& options) {
  const std::string text = chat_prompt(messages, limits, options);
  if (!limits.chat_template) return encode(tok, text, "messages");
  const ChatTemplate& t = *limits.chat_template;
  // Wherever the template writes the special tokens' texts ("</s><s>[INST]" between turns),
  // they are their ids, as Hugging Face tokenizes them; a BOS text without a BOS id is dropped.
  std::vector<tokenizers::Tokenizer::Special> specials;
  if (tok.bos_id()) specials.push_back({t.bos_token, *tok.bos_id()});
  if (tok.eos_id()) specials.push_back({t.eos_token, *tok.eos_id()});
  const std::string_view rest =
      !tok.bos_id() && !t.bos_token.empty() && text.starts_with(t.bos_token)
          ? std::string_view(text).substr(t.bos_token.size())
          : std::string_view(text);
  return invalid_as_400("messages", "the tokenizer cannot encode the text: ", [&] {
    return tok.encode_with_specials(rest, specials);
  });
}

}  // namespace tessera::serve

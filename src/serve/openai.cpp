#include "tessera/serve/openai.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "tessera/core/error.h"
#include "tessera/tokenizers/chat_template.h"

namespace tessera::serve {
namespace {

using Json = nlohmann::json;

// Text may hold partial UTF-8 (byte tokens): invalid bytes become U+FFFD instead of throwing.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

const char* type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, message, param);
}

// Typed, range-checked field access; absent or null fields give the default.
class Fields {
 public:
  explicit Fields(const Json& j) : j_(j) {}
  const Json* get(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  double number(const char* key, double lo, double hi, double def) const {
    const Json* v = get(key);
    if (!v) return def;
    if (!v->is_number())
      throw bad(key, std::string("'") + key + "' must be a number, got " + type_name(*v));
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi))
      throw bad(key, tessera::detail::str("'", key, "' must be in [", lo, ", ", hi, "], got ", x));
    return x;
  }
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer())
      throw bad(key, std::string("'") + key + "' must be an integer, got " + type_name(*v));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw bad(key, std::string("'") + key + "' is out of range");
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
      throw bad(key, tessera::detail::str("'", key, "' must be in [", lo, ", ", hi, "], got ", x));
    return x;
  }
  bool boolean(const char* key, bool def) const {
    const Json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean())
      throw bad(key, std::string("'") + key + "' must be a boolean, got " + type_name(*v));
    return v->get<bool>();
  }

 private:
  const Json& j_;
};

std::vector<int32_t> token_ids(const Json& arr, const char* param, int64_t vocab) {
  std::vector<int32_t> ids;
  for (const Json& v : arr) {
    if (!v.is_number_integer())
      throw bad(param,
                std::string("'") + param + "' token ids must be integers, got " + type_name(v));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= vocab)
      throw bad(param, tessera::detail::str("'", param, "' token ids must be in [0, ", vocab,
                                            "), got ", id));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

bool all_integers(const Json& arr) {
  return std::all_of(arr.begin(), arr.end(), [](const Json& v) { return v.is_number_integer(); });
}

std::vector<int32_t> encode(const tokenizers::Tokenizer& tok, const std::string& text) {
  return tok.encode(text, /*add_bos=*/tok.bos_id().has_value());
}

std::vector<int32_t> parse_prompt(const Json& p, const tokenizers::Tokenizer& tok, int64_t vocab) {
  if (p.is_string()) return encode(tok, p.get<std::string>());
  if (!p.is_array())
    throw bad("prompt", std::string("'prompt' must be a string or an array, got ") + type_name(p));
  if (p.empty()) throw bad("prompt", "'prompt' must not be empty");
  if (all_integers(p)) return token_ids(p, "prompt", vocab);
  if (p.size() > 1)
    throw bad("prompt", "batched prompts are not supported: send one prompt per request");
  if (p[0].is_string()) return encode(tok, p[0].get<std::string>());
  if (p[0].is_array() && all_integers(p[0])) return token_ids(p[0], "prompt", vocab);
  throw bad("prompt", "'prompt' must be a string, an array of token ids, or one of either");
}

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

std::string chat_prompt(const Json& messages) {
  if (!messages.is_array() || messages.empty())
    throw bad("messages", "'messages' must be a non-empty array");
  std::vector<tokenizers::ChatMessage> parsed;
  for (const Json& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
      throw bad("messages", "each message must be an object with a string 'role' and 'content'");
    const std::string role = m["role"].get<std::string>();
    if (!tokenizers::is_chat_role(role))
      throw bad("messages", "unknown message role '" + role + "'");
    parsed.push_back({role, message_text(m["content"])});
  }
  return tokenizers::plain_chat_prompt(parsed);
}

const std::set<std::string>& known_fields(Endpoint ep) {
  static const std::set<std::string> completions{"model",
                                                 "prompt",
                                                 "max_tokens",
                                                 "temperature",
                                                 "top_p",
                                                 "top_k",
                                                 "min_p",
                                                 "repetition_penalty",
                                                 "presence_penalty",
                                                 "frequency_penalty",
                                                 "seed",
                                                 "stop",
                                                 "stop_token_ids",
                                                 "ignore_eos",
                                                 "stream",
                                                 "stream_options",
                                                 "n",
                                                 "user",
                                                 "logprobs",
                                                 "echo"};
  static const std::set<std::string> chat = [] {
    std::set<std::string> s = completions;
    s.erase("prompt");
    s.erase("echo");
    s.insert({"messages", "max_completion_tokens", "top_logprobs"});
    return s;
  }();
  return ep == Endpoint::Completions ? completions : chat;
}

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
          {"total_tokens", s.prompt_tokens + s.completion_tokens}};
}

Json envelope(Endpoint ep, const CompletionState& s, bool chunk) {
  return {
      {"id", s.id}, {"object", object_name(ep, chunk)}, {"created", s.created}, {"model", s.model}};
}

}  // namespace

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

CompletionRequest parse_request(Endpoint endpoint, std::string_view body,
                                const tokenizers::Tokenizer& tokenizer, const ModelLimits& limits) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "could not parse the request body as JSON");
  if (!j.is_object())
    throw ApiError(400, std::string("expected a JSON object, got ") + type_name(j));
  for (const auto& [key, value] : j.items())
    if (!known_fields(endpoint).count(key))
      throw bad(key, "Unrecognized request argument supplied: " + key);
  const Fields f(j);
  CompletionRequest r;
  r.endpoint = endpoint;

  if (const Json* m = f.get("model"); m && !m->is_string())
    throw bad("model", std::string("'model' must be a string, got ") + type_name(*m));
  if (const Json* u = f.get("user"); u && !u->is_string())
    throw bad("user", std::string("'user' must be a string, got ") + type_name(*u));
  if (f.integer("n", 1, 1).value_or(1) != 1) throw bad("n", "only n = 1 is supported");
  if (const Json* lp = f.get("logprobs"); lp && !(lp->is_boolean() && !lp->get<bool>()))
    throw bad("logprobs", "logprobs are not supported");
  if (f.get("top_logprobs")) throw bad("top_logprobs", "logprobs are not supported");
  if (f.boolean("echo", false)) throw bad("echo", "echo is not supported");

  const char* prompt_param = endpoint == Endpoint::Completions ? "prompt" : "messages";
  if (endpoint == Endpoint::Completions) {
    const Json* p = f.get("prompt");
    if (!p) throw bad("prompt", "'prompt' is required");
    r.prompt = parse_prompt(*p, tokenizer, limits.vocab_size);
  } else {
    const Json* m = f.get("messages");
    if (!m) throw bad("messages", "'messages' is required");
    r.prompt = encode(tokenizer, chat_prompt(*m));
  }
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  if (P == 0) throw bad(prompt_param, "the prompt is empty (and the tokenizer has no BOS token)");
  if (P >= limits.max_model_len)
    throw bad(prompt_param,
              tessera::detail::str("This model's maximum context length is ", limits.max_model_len,
                                   " tokens. However, your prompt has ", P,
                                   " tokens, leaving no room for a completion."));

  // max_tokens: at least 1 and within the context left after the prompt; the default (16) is
  // capped to that room.
  const char* mt = f.get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const std::optional<int64_t> max_tokens = f.integer(mt, 1, INT32_MAX);
  const int64_t room = limits.max_model_len - P;
  if (max_tokens && *max_tokens > room)
    throw bad(mt,
              tessera::detail::str("This model's maximum context length is ", limits.max_model_len,
                                   " tokens. However, you requested ", P + *max_tokens, " tokens (",
                                   P, " in the prompt, ", *max_tokens, " in the completion)."));
  infer::StoppingCriteria& stopping = r.params.stopping;
  stopping.max_tokens = max_tokens.value_or(std::min<int64_t>(16, room));

  infer::SamplingParams& sp = r.params.sampling;
  sp.temperature = f.number("temperature", 0.0, 2.0, 1.0);
  sp.top_p = f.number("top_p", 0.0, 1.0, 1.0);
  if (sp.top_p == 0.0) throw bad("top_p", "'top_p' must be in (0, 1], got 0");
  sp.top_k = std::max<int64_t>(0, f.integer("top_k", -1, limits.vocab_size).value_or(0));
  sp.min_p = f.number("min_p", 0.0, 1.0, 0.0);
  sp.repetition_penalty = f.number("repetition_penalty", 1e-6, 100.0, 1.0);
  sp.presence_penalty = f.number("presence_penalty", -2.0, 2.0, 0.0);
  sp.frequency_penalty = f.number("frequency_penalty", -2.0, 2.0, 0.0);
  if (auto seed = f.integer("seed", INT64_MIN, INT64_MAX)) sp.seed = static_cast<uint64_t>(*seed);

  if (const Json* stop = f.get("stop")) {
    if (stop->is_string()) {
      stopping.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 16 &&
               std::all_of(stop->begin(), stop->end(),
                           [](const Json& s) { return s.is_string(); })) {
      for (const Json& s : *stop) stopping.stop.push_back(s.get<std::string>());
    } else {
      throw bad("stop", "'stop' must be a string or an array of at most 16 strings");
    }
    for (const std::string& s : stopping.stop)
      if (s.empty()) throw bad("stop", "stop strings must not be empty");
  }
  if (const Json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array())
      throw bad("stop_token_ids",
                std::string("'stop_token_ids' must be an array, got ") + type_name(*ids));
    stopping.stop_token_ids = token_ids(*ids, "stop_token_ids", limits.vocab_size);
  }
  if (!f.boolean("ignore_eos", false)) {
    if (auto eos = tokenizer.eos_id()) stopping.stop_token_ids.push_back(*eos);
    if (auto bos = tokenizer.bos_id()) stopping.stop_token_ids.push_back(*bos);
  }
  r.stream = f.boolean("stream", false);
  if (const Json* so = f.get("stream_options")) {
    if (!so->is_object())
      throw bad("stream_options",
                std::string("'stream_options' must be an object, got ") + type_name(*so));
    if (!r.stream) throw bad("stream_options", "'stream_options' requires 'stream': true");
    for (const auto& [key, value] : so->items())
      if (key != "include_usage") throw bad("stream_options", "Unrecognized stream option: " + key);
    r.include_usage = Fields(*so).boolean("include_usage", false);
  }
  return r;
}

std::string response_json(Endpoint ep, const CompletionState& s) {
  Json choice = {
      {"index", 0}, {"finish_reason", finish_json(s.finish_reason)}, {"token_ids", s.token_ids}};
  if (ep == Endpoint::Completions) {
    choice["text"] = s.text;
    choice["logprobs"] = nullptr;
  } else {
    choice["message"] = {{"role", "assistant"}, {"content", s.text}};
  }
  Json j = envelope(ep, s, false);
  j["choices"] = Json::array({choice});
  j["usage"] = usage_json(s);
  return dump(j);
}

std::string stream_event(Endpoint ep, const CompletionState& s, bool first) {
  Json choice = {
      {"index", 0}, {"finish_reason", finish_json(s.finish_reason)}, {"token_ids", s.token_ids}};
  if (ep == Endpoint::Completions) {
    choice["text"] = s.text;
    choice["logprobs"] = nullptr;
  } else {
    Json delta = {{"content", s.text}};
    if (first) delta["role"] = "assistant";
    choice["delta"] = delta;
  }
  Json j = envelope(ep, s, true);
  j["choices"] = Json::array({choice});
  return "data: " + dump(j) + "\n\n";
}

std::string usage_event(Endpoint ep, const CompletionState& s) {
  Json j = envelope(ep, s, true);
  j["choices"] = Json::array();
  j["usage"] = usage_json(s);
  return "data: " + dump(j) + "\n\n";
}

std::string models_json(const std::string& model, int64_t created, int64_t max_model_len) {
  Json m = {{"id", model},
            {"object", "model"},
            {"created", created},
            {"owned_by", "tessera"},
            {"max_model_len", max_model_len}};
  return dump(Json{{"object", "list"}, {"data", Json::array({m})}});
}

}  // namespace tessera::serve

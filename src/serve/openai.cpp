#include "tessera/serve/openai.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
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

std::string chat_prompt(const Json& messages, const ModelLimits& limits) {
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
  if (!limits.chat_template) return tokenizers::plain_chat_prompt(parsed);
  Json msgs = Json::array();
  for (const tokenizers::ChatMessage& m : parsed)
    msgs.push_back({{"role", m.role}, {"content", m.content}});
  const ChatTemplate& t = *limits.chat_template;
  try {
    return t.jinja.render({{"messages", msgs},
                           {"bos_token", t.bos_token},
                           {"eos_token", t.eos_token},
                           {"add_generation_prompt", true}});
  } catch (const ValueError& e) {  // raise_exception: the template refuses these messages
    throw bad("messages", std::string("the chat template rejected the messages: ") + e.what());
  }
}

// A chat's prompt tokens: see ChatTemplate for how BOS is handled.
std::vector<int32_t> chat_tokens(const Json& messages, const tokenizers::Tokenizer& tok,
                                 const ModelLimits& limits) {
  std::string text = chat_prompt(messages, limits);
  if (!limits.chat_template) return encode(tok, text);
  const std::string& bos = limits.chat_template->bos_token;
  const bool starts_with_bos = !bos.empty() && text.rfind(bos, 0) == 0;
  if (starts_with_bos) text.erase(0, bos.size());
  return tok.encode(text, starts_with_bos && tok.bos_id().has_value());
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
                                                 "echo",
                                                 "best_of",
                                                 "response_format"};
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

// The request body as a JSON object whose keys are all in known.
Json parse_object(std::string_view body, const std::set<std::string>& known) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "could not parse the request body as JSON");
  if (!j.is_object())
    throw ApiError(400, std::string("expected a JSON object, got ") + type_name(j));
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) throw bad(key, "Unrecognized request argument supplied: " + key);
  return j;
}

// The served name "model" asks for: 404 model_not_found for any other, the first when absent.
std::string served_model(const Fields& f, const ModelLimits& limits) {
  const Json* m = f.get("model");
  if (m && !m->is_string())
    throw bad("model", std::string("'model' must be a string, got ") + type_name(*m));
  const std::vector<std::string>& names = limits.served_names;
  if (!m) return names.empty() ? "" : names.front();
  const std::string name = m->get<std::string>();
  if (!names.empty() && std::find(names.begin(), names.end(), name) == names.end())
    throw ApiError(404, "The model '" + name + "' does not exist", "model", "invalid_request_error",
                   "model_not_found");
  return name;
}

// {"type": "text"} or nothing; structured output would need constrained decoding.
void check_response_format(const Fields& f) {
  const Json* rf = f.get("response_format");
  if (!rf) return;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    throw bad("response_format", "'response_format' must be an object with a string 'type'");
  const std::string type = (*rf)["type"].get<std::string>();
  if (type == "json_object" || type == "json_schema")
    throw bad("response_format", "response_format type '" + type +
                                     "' is not supported (tessera has no constrained decoding); "
                                     "use {\"type\": \"text\"}");
  if (type != "text") throw bad("response_format", "unknown response_format type '" + type + "'");
}

// n, best_of and logprobs into r.
void parse_choices(const Fields& f, Endpoint ep, CompletionRequest& r) {
  constexpr int64_t kMaxChoices = 128, kMaxTopLogprobs = 20;
  r.n = f.integer("n", 1, kMaxChoices).value_or(1);
  r.best_of = f.integer("best_of", 1, kMaxChoices).value_or(r.n);
  if (r.best_of < r.n)
    throw bad("best_of",
              tessera::detail::str("'best_of' must be >= n (", r.n, "), got ", r.best_of));
  if (r.best_of > r.n && r.stream) throw bad("best_of", "'best_of' > n cannot be streamed");
  if (ep == Endpoint::ChatCompletions) {
    const bool want = f.boolean("logprobs", false);
    const std::optional<int64_t> top = f.integer("top_logprobs", 0, kMaxTopLogprobs);
    if (top && !want) throw bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    r.logprobs = want ? top.value_or(0) : -1;
  } else if (const Json* lp = f.get("logprobs"); lp && !(lp->is_boolean() && !lp->get<bool>())) {
    r.logprobs = *f.integer("logprobs", 0, kMaxTopLogprobs);
  }
  // best_of ranks by cumulative logprob, which the engine then has to compute.
  r.params.logprobs = r.best_of > r.n ? std::max<int64_t>(r.logprobs, 0) : r.logprobs;
}

}  // namespace

infer::GenerationParams CompletionRequest::choice_params(int64_t i) const {
  infer::GenerationParams p = params;
  if (p.sampling.seed) *p.sampling.seed += static_cast<uint64_t>(i);
  return p;
}

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
  const Json j = parse_object(body, known_fields(endpoint));
  const Fields f(j);
  CompletionRequest r;
  r.endpoint = endpoint;
  r.model = served_model(f, limits);
  if (const Json* u = f.get("user"); u && !u->is_string())
    throw bad("user", std::string("'user' must be a string, got ") + type_name(*u));
  if (f.boolean("echo", false)) throw bad("echo", "echo is not supported");
  check_response_format(f);

  const char* prompt_param = endpoint == Endpoint::Completions ? "prompt" : "messages";
  if (endpoint == Endpoint::Completions) {
    const Json* p = f.get("prompt");
    if (!p) throw bad("prompt", "'prompt' is required");
    r.prompt = parse_prompt(*p, tokenizer, limits.vocab_size);
  } else {
    const Json* m = f.get("messages");
    if (!m) throw bad("messages", "'messages' is required");
    r.prompt = chat_tokens(*m, tokenizer, limits);
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
    } else if (stop->is_array() && stop->size() <= 4 &&
               std::all_of(stop->begin(), stop->end(),
                           [](const Json& s) { return s.is_string(); })) {
      for (const Json& s : *stop) stopping.stop.push_back(s.get<std::string>());
    } else {
      throw bad("stop", "'stop' must be a string or an array of at most 4 strings");
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
  parse_choices(f, endpoint, r);
  return r;
}

namespace {

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
    lps.push_back(e.logprob);
    Json top = Json::object();
    for (const auto& [token, lp] : e.top) top[token] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(e.token.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

Json choice_json(Endpoint ep, const CompletionState& s, const Choice& c, bool chunk, bool first) {
  Json j = {{"index", c.index},
            {"finish_reason", finish_json(c.finish_reason)},
            {"token_ids", c.token_ids}};
  if (ep == Endpoint::Completions) {
    j["text"] = c.text;
    j["logprobs"] = s.logprobs ? completion_logprobs(c) : Json(nullptr);
    return j;
  }
  j["logprobs"] = s.logprobs ? chat_logprobs(c) : Json(nullptr);
  if (!chunk) {
    j["message"] = {{"role", "assistant"}, {"content", c.text}};
  } else {
    Json delta = {{"content", c.text}};
    if (first) delta["role"] = "assistant";
    j["delta"] = delta;
  }
  return j;
}

}  // namespace

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

std::string models_json(const std::vector<std::string>& names, int64_t created,
                        int64_t max_model_len) {
  Json data = Json::array();
  for (const std::string& name : names)
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "tessera"},
                    {"max_model_len", max_model_len}});
  return dump(Json{{"object", "list"}, {"data", data}});
}

namespace {

// RFC 4648 base64 with padding (OpenAI's encoding_format "base64").
std::string base64(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);  // bytes in this group
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace

EmbeddingRequest parse_embedding_request(std::string_view body,
                                         const tokenizers::Tokenizer& tokenizer,
                                         const ModelLimits& limits) {
  static const std::set<std::string> known{"model", "input", "encoding_format", "user",
                                           "dimensions"};
  const Json j = parse_object(body, known);
  const Fields f(j);
  EmbeddingRequest r;
  r.model = served_model(f, limits);
  if (f.get("dimensions"))
    throw bad("dimensions", "'dimensions' is not supported: embeddings have the model's width");
  if (const Json* e = f.get("encoding_format")) {
    if (*e != "float" && *e != "base64")
      throw bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = *e == "base64";
  }
  const Json* input = f.get("input");
  if (!input) throw bad("input", "'input' is required");
  if (input->is_string()) {
    r.inputs.push_back(encode(tokenizer, input->get<std::string>()));
  } else if (input->is_array() && !input->empty() && all_integers(*input)) {
    r.inputs.push_back(token_ids(*input, "input", limits.vocab_size));
  } else if (input->is_array() && !input->empty()) {
    for (const Json& item : *input) {
      if (item.is_string())
        r.inputs.push_back(encode(tokenizer, item.get<std::string>()));
      else if (item.is_array() && all_integers(item))
        r.inputs.push_back(token_ids(item, "input", limits.vocab_size));
      else
        throw bad("input", "'input' items must be strings or arrays of token ids");
    }
  } else {
    throw bad("input", "'input' must be a string, an array of strings, or token id arrays");
  }
  for (const std::vector<int32_t>& ids : r.inputs) {
    if (ids.empty()) throw bad("input", "an 'input' is empty (and the tokenizer has no BOS token)");
    if (static_cast<int64_t>(ids.size()) > limits.max_model_len)
      throw bad("input", tessera::detail::str(
                             "This model's maximum context length is ", limits.max_model_len,
                             " tokens. However, an input has ", ids.size(), " tokens."));
  }
  return r;
}

std::string embeddings_json(const EmbeddingRequest& r,
                            const std::vector<std::vector<float>>& embeddings) {
  Json data = Json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const std::vector<float>& e = embeddings[i];
    Json vec = r.base64 ? Json(base64(std::string(reinterpret_cast<const char*>(e.data()),
                                                  e.size() * sizeof(float))))
                        : Json(e);
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vec}});
    tokens += static_cast<int64_t>(r.inputs.at(i).size());
  }
  return dump(Json{{"object", "list"},
                   {"data", data},
                   {"model", r.model},
                   {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
}

namespace {

Json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), ValueError, "[load_chat_template] expected a readable file, got ",
                path.string());
  const Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(!j.is_discarded(), ValueError, "[load_chat_template] expected JSON in ",
                path.string());
  return j;
}

// "chat_template" of a tokenizer_config.json: a string, or [{name, template}] ("default").
std::string config_template(const Json& config, const std::string& file) {
  const Json& t = config.at("chat_template");
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const Json& named : t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
  throw ValueError(
      "[load_chat_template] expected chat_template to be a string or a list with a "
      "'default' entry in " +
      file);
}

// A special token as tokenizer_config.json writes it: a string or {"content": ...}.
std::string special_token(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace

std::shared_ptr<const ChatTemplate> load_chat_template(const std::string& template_file,
                                                       const std::string& model_dir) {
  const std::filesystem::path config_path =
      std::filesystem::path(model_dir) / "tokenizer_config.json";
  const Json config = !model_dir.empty() && std::filesystem::exists(config_path)
                          ? read_json_file(config_path)
                          : Json::object();
  std::string source;
  if (!template_file.empty()) {
    std::ifstream in(template_file);
    TESSERA_CHECK(in.good(), ValueError, "[load_chat_template] expected a readable file, got ",
                  template_file);
    source.assign(std::istreambuf_iterator<char>(in), {});
    const Json j = Json::parse(source, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("chat_template")) source = config_template(j, template_file);
  } else if (config.is_object() && config.contains("chat_template")) {
    source = config_template(config, config_path.string());
  } else {
    return nullptr;
  }
  return std::make_shared<const ChatTemplate>(ChatTemplate{tokenizers::JinjaTemplate(source),
                                                           special_token(config, "bos_token"),
                                                           special_token(config, "eos_token")});
}

std::string tokenize_json(std::string_view body, const tokenizers::Tokenizer& tokenizer,
                          const ModelLimits& limits) {
  static const std::set<std::string> known{"model", "prompt", "messages", "add_special_tokens",
                                           "add_generation_prompt"};
  const Json j = parse_object(body, known);
  const Fields f(j);
  served_model(f, limits);
  const bool special = f.boolean("add_special_tokens", true) && tokenizer.bos_id().has_value();
  f.boolean("add_generation_prompt", true);  // type-checked; chat prompts always add it
  const Json* prompt = f.get("prompt");
  const Json* messages = f.get("messages");
  if ((prompt == nullptr) == (messages == nullptr))
    throw bad("prompt", "expected exactly one of 'prompt' and 'messages'");
  if (prompt && !prompt->is_string())
    throw bad("prompt", std::string("'prompt' must be a string, got ") + type_name(*prompt));
  // Messages tokenize exactly as a chat request's prompt does.
  const std::vector<int32_t> ids = prompt ? tokenizer.encode(prompt->get<std::string>(), special)
                                          : chat_tokens(*messages, tokenizer, limits);
  return dump(Json{{"tokens", ids},
                   {"count", static_cast<int64_t>(ids.size())},
                   {"max_model_len", limits.max_model_len}});
}

std::string detokenize_json(std::string_view body, const tokenizers::Tokenizer& tokenizer,
                            const ModelLimits& limits) {
  static const std::set<std::string> known{"model", "tokens"};
  const Json j = parse_object(body, known);
  const Fields f(j);
  served_model(f, limits);
  const Json* tokens = f.get("tokens");
  if (!tokens || !tokens->is_array()) throw bad("tokens", "'tokens' must be an array of token ids");
  return dump(Json{{"prompt", tokenizer.decode(token_ids(*tokens, "tokens", limits.vocab_size))}});
}

}  // namespace tessera::serve

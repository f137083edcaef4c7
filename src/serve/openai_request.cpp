// Request parsing: /v1/completions and /v1/chat/completions bodies into CompletionRequest
// (chat messages through the chat template), and vLLM's /tokenize and /detokenize.
#include <algorithm>
#include <climits>
#include <optional>
#include <set>

#include "serve/openai_chat_prompt.h"
#include "serve/openai_json.h"
#include "serve/openai_structured.h"
#include "serve/openai_tools.h"
#include "tessera/core/error.h"
#include "tessera/infer/structured_output.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

using namespace detail;

namespace {

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
                                                 "min_tokens",
                                                 "include_stop_str_in_output",
                                                 "truncate_prompt_tokens",
                                                 "stream",
                                                 "stream_options",
                                                 "n",
                                                 "user",
                                                 "logprobs",
                                                 "echo",
                                                 "best_of",
                                                 "response_format",
                                                 "logit_bias",
                                                 "structured_outputs",
                                                 "guided_json",
                                                 "guided_regex",
                                                 "guided_grammar",
                                                 "guided_choice"};
  static const std::set<std::string> chat = [] {
    std::set<std::string> s = completions;
    s.erase("prompt");
    s.erase("echo");
    s.insert({"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
              "parallel_tool_calls", "chat_template_kwargs", "add_generation_prompt",
              "continue_final_message"});
    return s;
  }();
  return ep == Endpoint::Completions ? completions : chat;
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}.
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Fields& f, int64_t vocab) {
  const Json* lb = f.get("logit_bias");
  if (!lb) return {};
  if (!lb->is_object())
    throw bad("logit_bias", std::string("'logit_bias' must be an object, got ") + type_name(*lb));
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : lb->items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
    }
    if (used != key.size() || id < 0 || id >= vocab)
      throw bad("logit_bias", tessera::detail::str("'logit_bias' keys must be token ids in [0, ",
                                                   vocab, "), got '", key, "'"));
    if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
      throw bad("logit_bias", "'logit_bias' values must be numbers in [-100, 100], got " +
                                  value.dump() + " for token " + key);
    out.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return out;
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

CompletionRequest parse_request(Endpoint endpoint, std::string_view body,
                                const tokenizers::Tokenizer& tokenizer, const ModelLimits& limits) {
  const Json j = parse_object(body, known_fields(endpoint));
  const Fields f(j);
  CompletionRequest r;
  r.endpoint = endpoint;
  r.model = served_model(f, limits);
  if (const auto lora = limits.lora_ids.find(r.model); lora != limits.lora_ids.end())
    r.params.lora_id = lora->second;
  if (const Json* u = f.get("user"); u && !u->is_string())
    throw bad("user", std::string("'user' must be a string, got ") + type_name(*u));
  r.params.json_grammar = output_grammar(f);
  if (endpoint == Endpoint::ChatCompletions) parse_tools(f, limits, r);

  const char* prompt_param = endpoint == Endpoint::Completions ? "prompt" : "messages";
  if (endpoint == Endpoint::Completions) {
    const Json* p = f.get("prompt");
    if (!p) throw bad("prompt", "'prompt' is required");
    r.prompt = parse_prompt(*p, tokenizer, limits.vocab_size);
  } else {
    const Json* m = f.get("messages");
    if (!m) throw bad("messages", "'messages' is required");
    r.prompt = chat_tokens(*m, tokenizer, limits, chat_options(f, /*with_tools=*/true));
    // The thinking is split off unless a grammar shapes the whole output.
    if (!r.params.json_grammar) r.reasoning = limits.reasoning_parser;
  }
  // vLLM's truncate_prompt_tokens: the prompt's last k tokens (-1: the context's worth).
  bool truncated = false;
  if (auto k = f.integer("truncate_prompt_tokens", -1, INT32_MAX)) {
    const int64_t keep = *k == -1 ? limits.max_model_len : *k;
    truncated = static_cast<int64_t>(r.prompt.size()) > keep;
    if (truncated) r.prompt.erase(r.prompt.begin(), r.prompt.end() - keep);
  }
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  if (P == 0) throw bad(prompt_param, "the prompt is empty (and the tokenizer has no BOS token)");
  if (P >= limits.max_model_len)
    throw bad(prompt_param,
              tessera::detail::str("This model's maximum context length is ", limits.max_model_len,
                                   " tokens. However, your prompt has ", P,
                                   " tokens, leaving no room for a completion."));

  // max_tokens: at least 1 and within the context left after the prompt. Its default is that
  // room for chat (OpenAI's and vLLM's) and 16 for legacy completions, capped to the room.
  const char* mt = f.get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const std::optional<int64_t> max_tokens = f.integer(mt, 1, INT32_MAX);
  const int64_t room = limits.max_model_len - P;
  if (max_tokens && *max_tokens > room)
    throw bad(mt,
              tessera::detail::str("This model's maximum context length is ", limits.max_model_len,
                                   " tokens. However, you requested ", P + *max_tokens, " tokens (",
                                   P, " in the prompt, ", *max_tokens, " in the completion)."));
  infer::StoppingCriteria& stopping = r.params.stopping;
  const int64_t default_max =
      endpoint == Endpoint::ChatCompletions ? room : std::min<int64_t>(16, room);
  const infer::GenerationConfig& model = limits.generation;  // the defaults its authors chose
  stopping.max_tokens =
      max_tokens.value_or(std::min(default_max, model.max_new_tokens.value_or(default_max)));

  infer::SamplingParams& sp = r.params.sampling;
  sp.temperature = f.number("temperature", 0.0, 2.0, model.temperature.value_or(1.0));
  sp.top_p = f.number("top_p", 0.0, 1.0, model.top_p.value_or(1.0));
  if (sp.top_p == 0.0) throw bad("top_p", "'top_p' must be in (0, 1], got 0");
  sp.top_k = std::max<int64_t>(
      0, f.integer("top_k", -1, limits.vocab_size).value_or(model.top_k.value_or(0)));
  sp.min_p = f.number("min_p", 0.0, 1.0, model.min_p.value_or(0.0));
  sp.repetition_penalty =
      f.number("repetition_penalty", 1e-6, 100.0, model.repetition_penalty.value_or(1.0));
  sp.presence_penalty = f.number("presence_penalty", -2.0, 2.0, 0.0);
  sp.frequency_penalty = f.number("frequency_penalty", -2.0, 2.0, 0.0);
  if (auto seed = f.integer("seed", INT64_MIN, INT64_MAX)) sp.seed = static_cast<uint64_t>(*seed);
  sp.logit_bias = parse_logit_bias(f, limits.vocab_size);

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
  stopping.include_stop_str_in_output = f.boolean("include_stop_str_in_output", false);
  stopping.min_tokens = f.integer("min_tokens", 0, stopping.max_tokens).value_or(0);
  if (!f.boolean("ignore_eos", false)) {
    if (auto eos = tokenizer.eos_id()) stopping.stop_token_ids.push_back(*eos);
    if (auto bos = tokenizer.bos_id()) stopping.stop_token_ids.push_back(*bos);
    for (int32_t id : model.eos_token_ids)
      if (id < limits.vocab_size) stopping.stop_token_ids.push_back(id);
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
  // echo (legacy completions): the prompt leads the text, and with logprobs its tokens lead the
  // logprobs (the engine's prompt_logprobs), as lm-evaluation-harness scores continuations.
  r.echo = endpoint == Endpoint::Completions && f.boolean("echo", false);
  if (r.echo) {
    if (r.stream) throw bad("echo", "'echo' cannot be streamed: send it without 'stream'");
    const Json& p = *f.get("prompt");
    const Json& text = p.is_array() && p.size() == 1 ? p[0] : p;
    r.echo_text =
        text.is_string() && !truncated ? text.get<std::string>() : tokenizer.decode(r.prompt);
    r.params.prompt_logprobs = r.logprobs;
  }
  return r;
}

std::string tokenize_json(std::string_view body, const tokenizers::Tokenizer& tokenizer,
                          const ModelLimits& limits) {
  static const std::set<std::string> known{"model",
                                           "prompt",
                                           "messages",
                                           "add_special_tokens",
                                           "add_generation_prompt",
                                           "continue_final_message",
                                           "chat_template_kwargs"};
  const Json j = parse_object(body, known);
  const Fields f(j);
  served_model(f, limits);
  const bool special = f.boolean("add_special_tokens", true) && tokenizer.bos_id().has_value();
  const Json* prompt = f.get("prompt");
  const Json* messages = f.get("messages");
  if ((prompt == nullptr) == (messages == nullptr))
    throw bad("prompt", "expected exactly one of 'prompt' and 'messages'");
  if (prompt && !prompt->is_string())
    throw bad("prompt", std::string("'prompt' must be a string, got ") + type_name(*prompt));
  // Messages tokenize exactly as a chat request's prompt does.
  const std::vector<int32_t> ids =
      prompt ? encode(tokenizer, prompt->get<std::string>(), "prompt", special)
             : chat_tokens(*messages, tokenizer, limits, chat_options(f, /*with_tools=*/false));
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

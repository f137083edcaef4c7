#pragma once
// The OpenAI API's JSON for /v1/completions, /v1/chat/completions and /v1/embeddings (and
// vLLM's /tokenize and /detokenize): request parsing with validation (every problem is an ApiError
// in OpenAI's error shape, status 4xx), and the bodies of responses, stream chunks, /v1/models and
// errors.
//
// Requests: model (one of the served names, else 404 model_not_found; absent: the first),
// prompt (a string, a token id array, or a one-element array of either) or messages
// ([{role, content}], content a string or [{type: "text", text}]), max_tokens (default 16 for
// completions, the rest of the context for chat; max_completion_tokens on chat is an alias
// that wins), temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty,
// frequency_penalty, seed, stop (a string or up to 4), stop_token_ids, ignore_eos, stream,
// stream_options.include_usage, tools with tool_choice "none", "auto", "required" or a named
// function (ToolChoice below; parallel_tool_calls false makes "required" call one), n (1..128) and
// best_of (n..128, not with stream: the n of best_of
// samples with the highest cumulative logprob), user, logit_bias ({"token id": -100..100}),
// response_format ({"type": "text"}; "json_object": the output is one JSON object; "json_schema"
// with {"json_schema": {"name", "schema"}}: it satisfies the schema, compiled by
// infer::JsonGrammar, whose refusals are 400s naming response_format) or vLLM's
// structured_outputs / guided_json / guided_choice (serve/openai_structured.h), and logprobs:
// on chat logprobs: true with top_logprobs 0..20, on completions logprobs: 0..20 (legacy shape).
// Logprobs are the model's raw log_softmax, before temperature and the other sampling filters
// (vLLM's default). echo is false only. Unknown fields are rejected, as OpenAI does. With a seed,
// choice i samples with seed + i, so n choices differ and each is reproducible.
//
// Chat prompts use the model's Hugging Face chat template when it has one (ChatTemplate below,
// `tessera serve --chat-template`), else the plain template: "<role>: <content>\n" per
// message, then "assistant:".
// Responses carry, beside OpenAI's fields, each choice's generated "token_ids".
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/infer/generate.h"
#include "tessera/infer/generation_config.h"
#include "tessera/infer/logprobs.h"
#include "tessera/serve/reasoning_parser.h"
#include "tessera/serve/tool_call_parser.h"
#include "tessera/tokenizers/jinja_template.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::serve {

// {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError : std::exception {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "");
  const char* what() const noexcept override { return message.c_str(); }
  int status;
  std::string message, param, type, code;
};
std::string error_json(const ApiError& e);

enum class Endpoint { Completions, ChatCompletions };

// A Hugging Face chat template (tokenizer_config.json's "chat_template") with the special
// token texts it refers to. In a rendered prompt, bos_token and eos_token become the tokenizer's
// BOS and EOS ids wherever they stand; no BOS is added otherwise (the template decides).
struct ChatTemplate {
  tokenizers::JinjaTemplate jinja;
  std::string bos_token, eos_token;
};
// The chat template for a model folder: template_file (raw Jinja, or a tokenizer_config.json)
// when given, else model_dir/tokenizer_config.json's "chat_template" (a string, or a list of
// {name, template} where "default" is used); null when neither has one (the plain template).
// bos_token / eos_token come from model_dir/tokenizer_config.json (strings or {"content"}).
// ValueError naming the file for unreadable or malformed ones.
std::shared_ptr<const ChatTemplate> load_chat_template(const std::string& template_file,
                                                       const std::string& model_dir);

// A LoRA adapter served under its own name (vLLM's --lora-modules): its Engine id
// (Engine::add_lora) and the folder it came from.
struct LoraModule {
  std::string name, path;
  int32_t id = 0;
};

struct ModelLimits {
  int64_t max_model_len = 0;  // prompt + completion tokens
  int64_t vocab_size = 0;
  std::vector<std::string> served_names;              // what "model" may name; empty: anything
  std::map<std::string, int32_t> lora_ids;  // LoRA adapters "model" may name -> Engine ids
  std::shared_ptr<const ChatTemplate> chat_template;  // null: the plain template
  std::optional<ToolCallFormat> tool_call_parser;     // null: tool_choice "auto" is a 400
  std::optional<ReasoningFormat> reasoning_parser;    // null: thinking stays in the content
  // The model's generation_config.json: its sampling settings are the defaults of requests that
  // set none, its eos_token_ids end replies as the tokenizer's EOS does.
  infer::GenerationConfig generation;
};

// Chat tool calling: with tools and tool_choice "required" the output is a JSON array of
// {"name", "parameters"} (the grammar's), with a named function its arguments; either becomes
// message.tool_calls. With "auto" (the default when there are tools) the model writes calls in
// its own format, split out by the server's tool-call parser (ModelLimits::tool_call_parser,
// vLLM's --enable-auto-tool-choice); without one it is a 400, as in vLLM.
enum class ToolChoice { None, Auto, Named, Required };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Completions;
  ToolChoice tool_choice = ToolChoice::None;
  std::string tool_name;  // Named: the function
  ToolCallFormat tool_format = ToolCallFormat::Hermes;  // Auto: the model's
  // Chat without a grammar on a server with a reasoning parser: how the thinking is split off.
  std::optional<ReasoningFormat> reasoning;
  std::vector<int32_t> prompt;
  infer::GenerationParams params;  // params.logprobs: what the engine computes
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int64_t n = 1, best_of = 1;
  int64_t logprobs = -1;  // top alternatives to report per token; -1: no logprobs in the reply
  std::string model;      // the served name it asked for (the first when absent)
  bool echo = false;      // completions: the prompt (echo_text) leads each choice's text
  std::string echo_text;  // the prompt as sent (a token id prompt: its decoded text)
  // Choice i's params: the seed (when given) moves to seed + i.
  infer::GenerationParams choice_params(int64_t i) const;
};

// Parses and validates a request; ApiError (400) naming the offending param otherwise. EOS (and
// BOS, which starts a new document in llama2.c's models) end generation unless ignore_eos.
CompletionRequest parse_request(Endpoint endpoint, std::string_view body,
                                const tokenizers::Tokenizer& tokenizer, const ModelLimits& limits);

// One generated token's logprobs as text (tokens as the tokenizer prints them).
struct LogprobEntry {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
  bool none = false;  // an echoed prompt's first token: nothing precedes it (logprob null)
};
// entries for a choice's new tokens; prev: the token before the first (for leading spaces).
std::vector<LogprobEntry> logprob_entries(const std::vector<infer::TokenLogprob>& logprobs,
                                          const tokenizers::Tokenizer& tokenizer, int32_t prev);

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text
  int64_t index = 0;                // among the choice's calls (stream chunks carry it)
};

// One choice of a response or of a stream chunk.
struct Choice {
  int64_t index = 0;
  std::string text;  // the whole text (responses) or this chunk's (stream chunks)
  std::vector<int32_t> token_ids;
  infer::FinishReason finish_reason = infer::FinishReason::None;
  std::vector<LogprobEntry> logprobs;
  int64_t text_offset = 0;  // completions' text_offset of logprobs[0] (bytes into the output)
  double cumulative_logprob = 0.0;  // for best_of
  std::vector<infer::TokenLogprob> prompt_logprobs;  // echo: the engine's, for prompt tokens 1..
  std::vector<ToolCall> tool_calls;                  // when the text held them (extract_tool_calls)
  bool called_tools = false;  // the model called tools of its choice: finish reason "tool_calls"
  std::string reasoning;      // the thinking split off the text (extract_reasoning), or its chunk
};

// What a finished (or streaming) request has produced.
struct CompletionState {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::vector<Choice> choices;
  bool logprobs = false;  // the request asked for them: render them, else "logprobs": null
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the engine took from its prefix cache
  ToolChoice tool_choice = ToolChoice::None;  // the request's
  std::string tool_name;
  ToolCallFormat tool_format = ToolCallFormat::Hermes;
  std::optional<ReasoningFormat> reasoning;  // the request's: messages carry reasoning_content
};

// A new tool call id: "call_" and 24 random letters and digits (OpenAI's shape), or 9 of them for
// Mistral's format (its chat templates refuse other ids when the conversation comes back).
std::string new_tool_call_id(ToolChoice choice, ToolCallFormat format);
// Turns a finished choice's text into its tool calls (tool_choice Named: the text is the
// arguments; Required: a JSON array of {"name", "parameters"}; Auto: the model's format, the
// rest of the text staying the content) and clears the text they came from; a text cut short
// (not such JSON) stays the content, without tool calls.
void extract_tool_calls(const CompletionState& s, Choice& c);

// Splits a finished choice's thinking off its text (s.reasoning) into c.reasoning, leaving the
// answer in c.text (for extract_tool_calls next).
void extract_reasoning(const CompletionState& s, Choice& c);

// A streamed choice of a reasoning request: its text split as it grows, each chunk carrying the
// reasoning and the answer the split adds (the answer then goes on to a ToolCallStream).
class ReasoningStream {
 public:
  // Appends c.text (this chunk's) to the text so far and replaces it and c.reasoning by what the
  // split of the text adds; finished: the choice has ended.
  void advance(const CompletionState& s, Choice& c, bool finished);

 private:
  std::string text_;
  size_t reasoning_sent_ = 0, content_sent_ = 0;
};

// A streamed choice under tool_choice "auto": its text split as it grows, each chunk carrying
// the content and the calls the split adds (calls whole, once they have closed).
class ToolCallStream {
 public:
  // Appends c.text (this chunk's) to the text so far and replaces it and c.tool_calls by what
  // the split of the text adds; finished: the choice has ended.
  void advance(const CompletionState& s, Choice& c, bool finished);

 private:
  std::string text_;
  size_t content_sent_ = 0, calls_sent_ = 0;
};

// Puts the prompt before each choice's text and, when s renders logprobs, the prompt tokens'
// entries before the choice's (the first with a null logprob), as OpenAI's echo does.
void echo_prompt(CompletionState& s, const CompletionRequest& r,
                 const tokenizers::Tokenizer& tokenizer);

// A complete response body.
std::string response_json(Endpoint endpoint, const CompletionState& s);
// One server-sent event "data: {...}\n\n" for a streamed delta of s.choices[c] (first: the
// chat chunk that carries the assistant role); a finish reason marks the choice's last chunk.
std::string stream_event(Endpoint endpoint, const CompletionState& s, size_t c, bool first);
// The final usage event (stream_options.include_usage): choices empty, usage set.
std::string usage_event(Endpoint endpoint, const CompletionState& s);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

// One entry per served name, then one per LoRA adapter (vLLM's shape: "root" its folder,
// "parent" the first served name).
std::string models_json(const std::vector<std::string>& names, const std::vector<LoraModule>& loras,
                        int64_t created, int64_t max_model_len);

// POST /v1/embeddings: {"model"?, "input": a string, strings, a token id array or arrays,
// "encoding_format": "float" (default) or "base64" (little-endian float32), "user"?}.
struct EmbeddingRequest {
  std::string model;
  std::vector<std::vector<int32_t>> inputs;  // each non-empty and within the context
  bool base64 = false;
};
EmbeddingRequest parse_embedding_request(std::string_view body,
                                         const tokenizers::Tokenizer& tokenizer,
                                         const ModelLimits& limits);
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
std::string embeddings_json(const EmbeddingRequest& r,
                            const std::vector<std::vector<float>>& embeddings);

// vLLM's POST /tokenize: {"model"?, "prompt"} or {"model"?, "messages"} (the chat template
// applied), "add_special_tokens" (default true: BOS) -> {"tokens", "count", "max_model_len"}.
std::string tokenize_json(std::string_view body, const tokenizers::Tokenizer& tokenizer,
                          const ModelLimits& limits);
// vLLM's POST /detokenize: {"model"?, "tokens"} -> {"prompt"}.
std::string detokenize_json(std::string_view body, const tokenizers::Tokenizer& tokenizer,
                            const ModelLimits& limits);

}  // namespace tessera::serve

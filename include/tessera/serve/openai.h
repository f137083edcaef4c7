#pragma once
// The OpenAI API's JSON for /v1/completions and /v1/chat/completions: request parsing with
// validation (every problem is an ApiError in OpenAI's error shape, status 4xx), and the bodies
// of responses, stream chunks, /v1/models and errors.
//
// Requests: model (any string), prompt (a string, a token id array, or a one-element array of
// either) or messages ([{role, content}], content a string or [{type: "text", text}]),
// max_tokens (default 16; max_completion_tokens is an alias), temperature, top_p, top_k, min_p,
// repetition_penalty, presence_penalty, frequency_penalty, seed, stop (string or array),
// stop_token_ids, ignore_eos, stream, stream_options.include_usage, n (1 only), user, and
// logprobs / echo (null or false only). Unknown fields are rejected, as OpenAI does.
//
// Chat prompts use a plain template: "<role>: <content>\n" per message, then "assistant:".
// Responses carry, beside OpenAI's fields, each choice's generated "token_ids".
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/infer/generate.h"
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

struct ModelLimits {
  int64_t max_model_len = 0;  // prompt + completion tokens
  int64_t vocab_size = 0;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::vector<int32_t> prompt;
  infer::GenerationParams params;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses and validates a request; ApiError (400) naming the offending param otherwise. EOS (and
// BOS, which starts a new document in llama2.c's models) end generation unless ignore_eos.
CompletionRequest parse_request(Endpoint endpoint, std::string_view body,
                                const tokenizers::Tokenizer& tokenizer, const ModelLimits& limits);

// What a finished (or streaming) request has produced.
struct CompletionState {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::string text;  // the whole text (responses) or this chunk's (stream chunks)
  std::vector<int32_t> token_ids;
  infer::FinishReason finish_reason = infer::FinishReason::None;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// A complete response body.
std::string response_json(Endpoint endpoint, const CompletionState& s);
// One server-sent event "data: {...}\n\n" for a streamed delta (first: the chat chunk that
// carries the assistant role); a finish reason marks the last content chunk.
std::string stream_event(Endpoint endpoint, const CompletionState& s, bool first);
// The final usage event (stream_options.include_usage): choices empty, usage set.
std::string usage_event(Endpoint endpoint, const CompletionState& s);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

std::string models_json(const std::string& model, int64_t created, int64_t max_model_len);

}  // namespace tessera::serve

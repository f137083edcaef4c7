#pragma once
// Single-stream generation with a static KV cache: prefill the prompt in one forward, then one
// token per forward, sampling and streaming each as it comes. What `tessera generate` runs.
//
//   auto model = infer::load_model("stories260K.bin");
//   infer::ModelRunner runner(*model);
//   infer::GenerationParams params;
//   params.sampling.temperature = 0;
//   params.stopping.max_tokens = 200;
//   infer::GenerateOptions opts;
//   opts.tokenizer = tok.get();
//   opts.on_token = [](int32_t id, std::string_view text) { std::cout << text; return true; };
//   infer::GenerationResult r = infer::generate(runner, std::vector<int32_t>{1}, params, opts);
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/infer/model_runner.h"
#include "tessera/infer/sampler.h"
#include "tessera/infer/stopping.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::infer {

class JsonGrammar;

struct GenerationParams {
  SamplingParams sampling;
  StoppingCriteria stopping;
  // Engine only: >= 0 reports each generated token's raw logprob and the top `logprobs`
  // alternatives in RequestOutput::logprobs (infer/logprobs.h); -1 computes nothing.
  int64_t logprobs = -1;
  // Engine only: >= 0 reports the same for every prompt token after the first, given the tokens
  // before it (vLLM's prompt_logprobs, OpenAI's echo), in the request's first output. The whole
  // prompt is then computed: it takes nothing from the prefix cache.
  int64_t prompt_logprobs = -1;
  // Engine only (needs its tokenizer): every token keeps the text inside this JSON grammar
  // (infer/structured_output.h), stop tokens come only once the value is complete, and the
  // request finishes (Stop) when nothing can follow it. Null: free text.
  std::shared_ptr<const JsonGrammar> json_grammar;
  // Engine only: the LoRA adapter (Engine::add_lora's id) the request runs through; 0: the base
  // model (vLLM's lora_request).
  int32_t lora_id = 0;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (a stop token included), without the prompt
  std::string text;             // their text without any stop string (empty without tokenizer)
  FinishReason finish_reason = FinishReason::None;
};

// Called with each new token and the text it adds (possibly empty: held back or partial UTF-8);
// return false to stop (finish reason Abort). Text still held back when generation ends (a
// possible stop-string prefix that never completed) comes last with token -1.
using TokenCallback = std::function<bool(int32_t token, std::string_view text)>;

struct GenerateOptions {
  // Decodes text and finds stop strings. EOS is not implied: put it in stop_token_ids.
  const tokenizers::Tokenizer* tokenizer = nullptr;
  TokenCallback on_token;
  // Sees the logits each token is drawn from (before penalties), e.g. for tests. Set, it makes
  // greedy decoding read every step's logits back from a device runner too.
  std::function<void(std::span<const float>)> on_logits;
};

// Generates after prompt (non-empty token ids; start from BOS for an empty text prompt) until a
// stop condition or the model's context is full (finish reason Length). ValueError for an empty
// or too long prompt or invalid params.
GenerationResult generate(ModelRunner& runner, std::span<const int32_t> prompt,
                          const GenerationParams& params, const GenerateOptions& options = {});

}  // namespace tessera::infer

#pragma once
// The inference engine: requests enter a queue, and every step() the scheduler admits what the
// paged KV cache allows, one forward runs the prefill and decode tokens of the whole running
// batch, each sequence that finished its prompt samples a token, new tokens stream out, and
// finished sequences (max tokens, stop tokens, stop strings) free their blocks. A request's
// tokens do not depend on the rest of the batch (the forward is batch-invariant and each request
// has its own seeded sampler), so greedy results equal running it alone. A step whose sampling
// rows are all greedy without penalties or logprobs asks the runner for their argmax ids only
// (ModelRunner::greedy_tokens), and on a GPU a step whose rows have no penalties or logprobs
// has them drawn there (ModelRunner::sample_tokens, the host sampler's distribution and draw):
// the logits then never leave it. With prefix caching (on by default), the full blocks a
// request computed stay in the cache after it finishes, and a later request whose prompt starts
// with the same tokens (a chat's system prompt and history, the n choices of one prompt) takes
// them instead of prefilling them again. A request asking for prompt logprobs (scoring text, as
// OpenAI's echo) computes its whole prompt, and its step brings those rows' logits to the host.
// A request with a JSON grammar (structured output) samples on the host from logits masked to
// the tokens that keep its text inside the grammar, and finishes when the value is complete.
// With speculative decoding (EngineConfig::speculative, infer/speculative.h), a decoding
// request whose recent tokens occurred before (in its text, or else in a recent output of
// another request) runs the tokens that followed them as drafts in the same forward, and a step
// may then bring it several tokens, the same ones as without.
//
//   infer::Engine engine(model, {.num_blocks = 512});
//   GenerationParams p;
//   p.stopping.max_tokens = 64;
//   int64_t id = engine.add_request(prompt_ids, p);
//   while (engine.has_unfinished())
//     for (const infer::RequestOutput& out : engine.step()) { ... }
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/infer/generate.h"
#include "tessera/infer/kv_cache.h"
#include "tessera/infer/logprobs.h"
#include "tessera/infer/model_runner.h"
#include "tessera/infer/scheduler.h"
#include "tessera/infer/speculative.h"
#include "tessera/infer/structured_output.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::infer {

struct EngineConfig {
  int64_t block_size = 16;
  // Cache blocks; 0: as many as kv_cache_memory_bytes holds, or without it enough for
  // max_num_seqs sequences of max_model_len.
  int64_t num_blocks = 0;
  // The cache's size in bytes instead of blocks (vLLM's --kv-cache-memory): a bfloat16 cache gets
  // twice the blocks of a float32 one. 0: unset; ValueError with num_blocks too, or below a block.
  int64_t kv_cache_memory_bytes = 0;
  int64_t max_num_seqs = 32;
  int64_t max_num_batched_tokens = 2048;
  // The longest sequence, prompt and output (vLLM's --max-model-len): at most the model's
  // context, which 0 means (the engine then holds it here). A long-context model's full length
  // may be more than a cache of a few sequences should be sized for.
  int64_t max_model_len = 0;
  // Requests without a seed get Philox(seed, request id)'s first word.
  uint64_t seed = 0;
  // Keep computed full blocks findable by their tokens (vLLM's --enable-prefix-caching).
  bool enable_prefix_caching = true;
  // What the cache stores keys and values as: float32 (the model's compute dtype), or bfloat16,
  // which halves the cache's memory and what decode attention reads (vLLM's --kv-cache-dtype).
  DType kv_cache_dtype = kFloat32;
  // What the CPU runner keeps its linear layers' weights as: float32, bfloat16 (half the bytes a
  // decode step streams; vLLM's --dtype) or int8 (a quarter: per-channel quantization, vLLM's
  // --quantization). ModelRunner's weight_dtype.
  DType weight_dtype = kFloat32;
  // Prompt-lookup speculative decoding (vLLM's --speculative-config with method "ngram"); off
  // by default.
  SpeculativeConfig speculative;
};

// kv_cache_dtype or weight_dtype (what) from vLLM's spelling: "auto" (float32, the compute
// dtype), "float32" or "bfloat16"; ValueError naming op otherwise.
DType inference_dtype_from_name(std::string_view name, const char* op, const char* what);
// weight_dtype from vLLM's --dtype and --quantization ("none" or "" and "int8", which needs
// dtype auto or float32); ValueError naming op otherwise.
DType weight_dtype_from_names(std::string_view dtype, std::string_view quantization,
                              const char* op);

// What a step produced for one request.
struct RequestOutput {
  int64_t request_id = 0;
  // This step's tokens (empty when only text was flushed; several when drafts were accepted).
  std::vector<int32_t> new_tokens;
  std::string text;                 // the text they add (stop strings excluded)
  FinishReason finish_reason = FinishReason::None;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // so far
  int64_t cached_tokens = 0;      // prompt tokens taken from the prefix cache
  // One per new token when the request asked for logprobs (GenerationParams::logprobs >= 0).
  std::vector<TokenLogprob> logprobs;
  // In a request's first output, when it asked for prompt_logprobs: one per prompt token after
  // the first (that token's logprob given the tokens before it).
  std::vector<TokenLogprob> prompt_logprobs;
  // With an Abort: why the engine failed the request (empty for a client's or shutdown's abort).
  std::string error;
  bool finished() const { return finish_reason != FinishReason::None; }
};

struct EngineStats {
  int64_t num_waiting = 0, num_running = 0;
  int64_t blocks_used = 0, blocks_total = 0;
  int64_t num_preemptions = 0;  // since start
  int64_t num_steps = 0;
  // Since start: tokens of admitted sequences looked up in the prefix cache, and found there.
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  // Since start, speculative decoding: steps in which a sequence ran drafts, the drafts run and
  // those accepted (vLLM's spec_decode num_drafts, num_draft_tokens, num_accepted_tokens).
  int64_t spec_num_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

class Engine {
 public:
  // tokenizer (optional) gives text and stop strings.
  Engine(const models::CausalLM& model, const EngineConfig& config = {},
         std::shared_ptr<const tokenizers::Tokenizer> tokenizer = nullptr);
  ~Engine();

  // Queues a request and returns its id. ValueError for an empty prompt, one that leaves no room
  // in the model's context or the cache, or invalid params (logprobs or prompt_logprobs
  // outside [-1, vocab], logit_bias tokens outside the vocabulary, a json_grammar without a
  // tokenizer or whose value no token of it can start).
  // max_tokens is capped to the context.
  int64_t add_request(std::vector<int32_t> prompt, const GenerationParams& params);
  // Drops a request (waiting or running) and frees its blocks; unknown ids are ignored.
  void abort_request(int64_t id);
  // The mean over prompt's tokens of the last hidden state after the final norm (an embedding,
  // [hidden size]), in a forward of its own against a scratch cache: independent of the
  // requests in flight. ValueError as add_request for the prompt, or for a model on a device.
  std::vector<float> embed(std::span<const int32_t> prompt);
  // One scheduling + forward + sampling step; the outputs of the requests that advanced or
  // finished (valid until the next call).
  const std::vector<RequestOutput>& step();
  bool has_unfinished() const { return !requests_.empty(); }
  EngineStats stats() const;

  // Registers a LoRA adapter for requests to name by GenerationParams::lora_id; returns its id
  // (1, 2, ...). Errors as ModelRunner::add_lora.
  int32_t add_lora(const nn::LoraAdapter& adapter) { return runner_.add_lora(adapter); }
  const ModelRunner& runner() const { return runner_; }
  const EngineConfig& config() const { return config_; }
  const tokenizers::Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  struct Request;
  void finish(Request& r, FinishReason reason, RequestOutput& out);
  // Sets each decoding sequence's draft (speculative decoding) before the step is scheduled.
  void propose_drafts();
  // Registers seq's newly computed full blocks in the prefix cache (when it is on).
  void cache_computed_blocks(Sequence& seq);
  // Where a scheduled sequence's rows are among the logits the step returns.
  struct StepRows {
    Request* request = nullptr;  // the sequence's, looked up once per step
    int64_t sample = -1;        // the row it samples from (-1: its prefill goes on)
    int64_t num_drafts = 0;     // rows after it, one per draft token run
    int64_t prompt_first = -1;  // its first prompt-logprob row
    int64_t num_prompt = 0;     // prompt-logprob rows, for positions computed this step
  };
  // Appends to out the next token of a request whose sequence samples row `row` of the step
  // (the runner's, or drawn from the logits), the text and logprobs it adds, and sets its
  // finish reason if that token ends it (the caller finishes it).
  void sample_row(Request& r, int64_t row, std::span<const int32_t> runner_tokens,
                  std::span<const float> logits, RequestOutput& out);
  // The tokens a scheduled sequence brings this step: its sample row's, then while a draft
  // equals the token sampled before it, the next row's; finishes the request when one ends it.
  RequestOutput sample_tokens(Request& r, const StepRows& rows,
                              std::span<const int32_t> runner_tokens,
                              std::span<const float> logits);
  // Adds the scheduled sequences to batch_, and their logit rows to rows_.
  void build_batch(const SchedulerOutput& plan);
  // Masks logits_ to the tokens that keep r's text in its grammar (stop tokens once the value is
  // complete); false when nothing may follow (the value is complete and no stop token is
  // allowed). ValueError when no token can continue an incomplete value.
  bool constrain_to_grammar(Request& r);
  // Appends to r the prompt logprobs of the positions computed this step.
  void collect_prompt_logprobs(Request& r, int64_t first_position, const StepRows& rows,
                               std::span<const float> logits);

  EngineConfig config_;
  ModelRunner runner_;
  std::shared_ptr<const tokenizers::Tokenizer> tokenizer_;
  std::unique_ptr<PagedKVCache> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;
  int64_t next_id_ = 0, num_steps_ = 0;
  StepBatch batch_;
  std::vector<float> logits_;
  std::unique_ptr<TokenMasker> masker_;  // built for the first request with a JSON grammar
  std::vector<uint8_t> allowed_;         // its mask of the step's row
  std::vector<int32_t> run_tokens_;      // a sequence's decoding token and drafts
  std::vector<RowSampling> draws_;  // the step's sampled rows, for a runner that draws them
  std::vector<StepRows> rows_;      // per scheduled sequence of the step
  std::vector<RequestOutput> outputs_;
  int64_t spec_num_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
  DraftPolicy draft_policy_;
  std::unique_ptr<NgramHistory> history_;  // finished outputs, for drafts across requests
  std::vector<int32_t> history_draft_;     // its proposal of the moment
};

}  // namespace tessera::infer

#pragma once
// An LLM over the continuous-batching engine, shaped like vLLM's LLM and AsyncLLMEngine: load
// any model file the CLI reads (with its tokenizer), then either generate for many prompts at
// once (all submitted together, so the engine batches them) or submit one request and take its
// outputs as they arrive (a RequestStream), from the engine's own thread (infer::AsyncEngine).
//
//   llm::LLM llm({.model = "stories260K.bin", .tokenizer = "stories260K_idtok.bin"});
//   llm::SamplingParams p;
//   p.temperature = 0;
//   auto seqs = llm.generate({{llm.encode("Once upon")}}, {p});  // seqs[0][0].text
//
// Python's tessera.llm is a thin layer over this.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/infer/async_engine.h"
#include "tessera/llm/model_files.h"
#include "tessera/llm/sampling_params.h"

namespace tessera::serve {
struct ChatTemplate;
}

namespace tessera::llm {

struct LLMConfig {
  std::string model;      // any path load_model reads
  std::string tokenizer;  // "": the one the model records (llama2.c files record none)
  // A tokenizer object (a custom Tokenizer subclass) instead of the one `tokenizer` names.
  std::shared_ptr<tokenizers::Tokenizer> tokenizer_object;
  std::string data_dir;   // the folder holding gpt2/encoder.json, for the "gpt2" tokenizer
  std::string device = "cpu";
  // JSON merged into the model's config before it is built (infer::LoadOptions).
  std::string config_overrides;
  // The chat template of chat(): a Jinja file or a tokenizer_config.json (`serve
  // --chat-template`); "": the model folder's tokenizer_config.json (LoadedModel::folder, as
  // the server's), else the plain template.
  std::string chat_template;
  infer::EngineConfig engine;
};

// One generated sequence (so far).
struct Sequence {
  std::vector<int32_t> token_ids;  // a stop token included
  std::string text;                // without stop strings
  infer::FinishReason finish_reason = infer::FinishReason::None;
  // Per token: its raw logprob (log_softmax of the model's logits) and the top alternatives.
  std::vector<infer::TokenLogprob> logprobs;
  // With SamplingParams::prompt_logprobs, on a request's first sequence: one per prompt token
  // after the first (the others leave it empty).
  std::vector<infer::TokenLogprob> prompt_logprobs;
  // Why the engine failed this sequence (it ended with Abort then); empty otherwise.
  std::string error;
};

// The n sequences of one request in flight. The engine thread queues each output (then calls
// on_output, which must be quick); the consumer takes them. Destroying it closes it.
class RequestStream {
 public:
  struct Delta {
    int64_t index = 0;  // which of the n sequences
    infer::RequestOutput output;
  };
  ~RequestStream();
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  // The outputs queued since the last call, in arrival order.
  std::vector<Delta> take();
  // Waits until an output is queued (true) or the timeout passes (false).
  bool wait_for(std::chrono::milliseconds timeout);
  // Whether every sequence's last output has been queued (read it before take() to know that
  // take() returns the last outputs).
  bool finished() const;
  // Aborts the unfinished sequences: the engine frees their KV blocks, and each gets one last
  // output with finish reason Abort.
  void abort();
  // Aborts what is unfinished, waits for on_output calls under way, and destroys on_output here
  // (it may hold objects, such as Python callables, that must not die on the engine thread).
  // No on_output calls follow.
  void close();
  // The engine's request ids, one per sequence.
  const std::vector<int64_t>& request_ids() const { return ids_; }

 private:
  friend class LLM;
  struct State;
  RequestStream(std::shared_ptr<infer::AsyncEngine> engine, std::shared_ptr<State> state);

  std::shared_ptr<infer::AsyncEngine> engine_;
  std::shared_ptr<State> state_;
  std::vector<int64_t> ids_;
};

class LLM {
 public:
  // ValueError / RuntimeError as load_model and model_tokenizer (op "LLM"), or for an engine
  // config the engine rejects.
  explicit LLM(const LLMConfig& config);

  const tokenizers::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<tokenizers::Tokenizer> shared_tokenizer() const { return tokenizer_; }
  const LoadedModel& model() const { return loaded_; }
  // The longest sequence the engine takes (EngineConfig::max_model_len, resolved).
  int64_t max_model_len() const { return engine_->engine().config().max_model_len; }
  // As of the engine's last step, submit or abort.
  infer::EngineStats stats() const { return engine_->stats(); }

  // A text prompt's ids as `tessera generate` encodes it (after BOS when the tokenizer has one).
  std::vector<int32_t> encode(std::string_view prompt) const;
  // A conversation's prompt ids as the server's chat endpoint makes them from the same fields
  // of a request (JSON): "messages", and optionally "tools", "chat_template_kwargs",
  // "add_generation_prompt" and "continue_final_message"; through LLMConfig::chat_template or
  // the plain template. ValueError "[LLM.chat] ..." for what the server answers with a 400.
  std::vector<int32_t> encode_chat(const std::string& request_json) const;

  // The engine id of the LoRA adapter folder at path (io::load_lora_adapter), loading and
  // registering it on its first use (vLLM's LoRARequest); errors as load_lora_adapter and
  // Engine::add_lora.
  int32_t lora(const std::string& path);

  // Submits params.n sequences for prompt, through adapter lora_id (0: none; from lora()).
  // ValueError for invalid params or a prompt the engine refuses; nothing stays submitted then.
  // on_output runs on the engine thread after each output is queued, and after abort().
  std::unique_ptr<RequestStream> submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                        std::function<void()> on_output = {}, int32_t lora_id = 0);

  // Generates for every prompt (params and lora_ids: one for all, or one per prompt; no
  // lora_ids: the base model), all submitted at once, and waits for them: result[i] holds
  // prompt i's n sequences. interrupted, when given, is polled every 50 ms while waiting; when
  // it returns true every request is aborted and what was generated so far comes back.
  std::vector<std::vector<Sequence>> generate(std::span<const std::vector<int32_t>> prompts,
                                              std::span<const SamplingParams> params,
                                              const std::function<bool()>& interrupted = {},
                                              std::span<const int32_t> lora_ids = {});

 private:
  LoadedModel loaded_;
  std::shared_ptr<tokenizers::Tokenizer> tokenizer_;
  std::shared_ptr<const serve::ChatTemplate> chat_template_;  // null: the plain template
  // Keeps the model alive as long as any RequestStream holds the engine.
  std::shared_ptr<infer::AsyncEngine> engine_;
  std::mutex lora_mutex_;
  std::map<std::string, int32_t> lora_ids_;  // by the adapter folder's absolute path
};

}  // namespace tessera::llm

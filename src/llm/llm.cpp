#include "tessera/llm/llm.h"

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "serve/openai_chat_prompt.h"
#include "tessera/core/error.h"
#include "tessera/io/lora_adapter.h"

namespace tessera::llm {

struct RequestStream::State {
  mutable std::mutex mutex;
  std::condition_variable ready;  // an output is queued, or an on_output call returned
  std::vector<Delta> queue;
  std::vector<bool> done;  // per sequence: its last output is queued
  int64_t unfinished = 0;
  std::function<void()> on_output;
  int64_t calling = 0;  // on_output calls under way
  bool closed = false;  // no more on_output calls

  // The engine thread's callback for sequence index; false once it was aborted here.
  bool push(int64_t index, const infer::RequestOutput& out) {
    bool call = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done[index]) return false;
      queue.push_back({index, out});
      if (out.finished()) {
        done[index] = true;
        --unfinished;
      }
      call = on_output && !closed;
      calling += call;
    }
    ready.notify_all();
    if (call) notify();
    return true;
  }

  // Runs on_output, counted in `calling` by the caller.
  void notify() {
    on_output();
    {
      std::lock_guard<std::mutex> lock(mutex);
      --calling;
    }
    ready.notify_all();
  }
};

RequestStream::RequestStream(std::shared_ptr<infer::AsyncEngine> engine,
                             std::shared_ptr<State> state)
    : engine_(std::move(engine)), state_(std::move(state)) {}

RequestStream::~RequestStream() { close(); }

void RequestStream::close() {
  abort();
  std::function<void()> on_output;
  {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->closed = true;
    state_->ready.wait(lock, [&] { return state_->calling == 0; });
    on_output.swap(state_->on_output);
  }
  // Destroyed here, on the caller's thread, rather than wherever the state's last owner is.
  on_output = nullptr;
}

std::vector<RequestStream::Delta> RequestStream::take() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<Delta> out;
  out.swap(state_->queue);
  return out;
}

bool RequestStream::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  return state_->ready.wait_for(lock, timeout, [&] { return !state_->queue.empty(); });
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->unfinished == 0;
}

void RequestStream::abort() {
  std::vector<int64_t> aborted;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (size_t i = 0; i < ids_.size(); ++i) {
      if (state_->done[i]) continue;
      state_->done[i] = true;
      --state_->unfinished;
      infer::RequestOutput out;
      out.request_id = ids_[i];
      out.finish_reason = infer::FinishReason::Abort;
      state_->queue.push_back({static_cast<int64_t>(i), std::move(out)});
      aborted.push_back(ids_[i]);
    }
  }
  // Outside the stream's lock: an engine callback may be waiting for it.
  for (int64_t id : aborted) engine_->abort(id);
  if (aborted.empty()) return;
  bool call = false;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    call = state_->on_output && !state_->closed;
    state_->calling += call;
  }
  state_->ready.notify_all();
  if (call) state_->notify();
}

LLM::LLM(const LLMConfig& config) {
  const Device device = device_option(config.device, "LLM");
  infer::LoadOptions load_options;
  load_options.config_overrides = config.config_overrides;
  loaded_ = load_model(config.model, load_options);
  loaded_.model->to(device);
  tokenizer_ = config.tokenizer_object
                   ? config.tokenizer_object
                   : model_tokenizer(loaded_, config.tokenizer, config.data_dir, "LLM");
  chat_template_ = serve::load_chat_template(config.chat_template, loaded_.folder());
  auto engine = std::make_unique<infer::Engine>(*loaded_.model, config.engine, tokenizer_);
  // The deleter holds the model: the engine reads its weights until it is gone.
  engine_ = std::shared_ptr<infer::AsyncEngine>(
      new infer::AsyncEngine(std::move(engine)),
      [model = loaded_.model](infer::AsyncEngine* e) { delete e; });
}

std::vector<int32_t> LLM::encode(std::string_view prompt) const {
  return prompt_ids(*tokenizer_, prompt);
}

std::vector<int32_t> LLM::encode_chat(const std::string& request_json) const {
  const serve::detail::Json request = serve::detail::Json::parse(request_json, nullptr, false);
  TESSERA_CHECK(request.is_object() && request.contains("messages"), ValueError,
                "[LLM.chat] expected a JSON object with \"messages\", got ", request_json);
  serve::ModelLimits limits;
  limits.chat_template = chat_template_;
  try {
    const serve::detail::Fields fields(request);
    return serve::chat_tokens(request["messages"], *tokenizer_, limits,
                              serve::chat_options(fields, /*with_tools=*/true));
  } catch (const serve::ApiError& e) {
    throw ValueError("[LLM.chat] " + e.message);
  }
}

int32_t LLM::lora(const std::string& path) {
  const std::string key = std::filesystem::absolute(path).lexically_normal().string();
  std::lock_guard<std::mutex> lock(lora_mutex_);
  if (const auto it = lora_ids_.find(key); it != lora_ids_.end()) return it->second;
  const int32_t id = engine_->add_lora(io::load_lora_adapter(path));
  lora_ids_.emplace(key, id);
  return id;
}

std::unique_ptr<RequestStream> LLM::submit(std::vector<int32_t> prompt,
                                           const SamplingParams& params,
                                           std::function<void()> on_output, int32_t lora_id) {
  params.validate();
  auto state = std::make_shared<RequestStream::State>();
  state->done.assign(static_cast<size_t>(params.n), false);
  state->unfinished = params.n;
  state->on_output = std::move(on_output);
  std::unique_ptr<RequestStream> stream(new RequestStream(engine_, state));
  // A refused sequence leaves the stream's destructor to abort the ones already submitted.
  for (int64_t i = 0; i < params.n; ++i) {
    infer::GenerationParams g = params.generation_params(tokenizer_.get(), i);
    g.lora_id = lora_id;
    if (!params.ignore_eos)  // the model's other reply ends (generation_config.json)
      for (int32_t id : loaded_.generation.eos_token_ids) g.stopping.stop_token_ids.push_back(id);
    stream->ids_.push_back(engine_->submit(
        prompt, g, [state, i](const infer::RequestOutput& out) { return state->push(i, out); }));
  }
  return stream;
}

std::vector<std::vector<Sequence>> LLM::generate(std::span<const std::vector<int32_t>> prompts,
                                                 std::span<const SamplingParams> params,
                                                 const std::function<bool()>& interrupted,
                                                 std::span<const int32_t> lora_ids) {
  TESSERA_CHECK(params.size() == 1 || params.size() == prompts.size(), ValueError,
                "[LLM.generate] expected one sampling params or one per prompt (", prompts.size(),
                "), got ", params.size());
  TESSERA_CHECK(lora_ids.size() <= 1 || lora_ids.size() == prompts.size(), ValueError,
                "[LLM.generate] expected no LoRA adapter, one, or one per prompt (", prompts.size(),
                "), got ", lora_ids.size());
  for (const SamplingParams& p : params) p.validate();
  std::vector<std::unique_ptr<RequestStream>> streams;
  std::vector<std::vector<Sequence>> results(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SamplingParams& p = params[params.size() == 1 ? 0 : i];
    const int32_t lora_id = lora_ids.empty() ? 0 : lora_ids[lora_ids.size() == 1 ? 0 : i];
    streams.push_back(submit(prompts[i], p, {}, lora_id));
    results[i].resize(static_cast<size_t>(p.n));
  }
  constexpr auto kPoll = std::chrono::milliseconds(50);
  auto polled = std::chrono::steady_clock::now();
  bool stopped = false;
  for (size_t i = 0; i < streams.size(); ++i) {
    RequestStream& s = *streams[i];
    for (;;) {
      // Read before take(): once finished, every output is queued and this take() gets them.
      const bool finished = s.finished();
      for (RequestStream::Delta& d : s.take()) {
        Sequence& seq = results[i][static_cast<size_t>(d.index)];
        seq.token_ids.insert(seq.token_ids.end(), d.output.new_tokens.begin(),
                             d.output.new_tokens.end());
        seq.text += d.output.text;
        seq.finish_reason = d.output.finish_reason;
        seq.logprobs.insert(seq.logprobs.end(), d.output.logprobs.begin(), d.output.logprobs.end());
        if (!d.output.prompt_logprobs.empty()) seq.prompt_logprobs = d.output.prompt_logprobs;
        if (!d.output.error.empty()) seq.error = d.output.error;
      }
      if (finished) break;
      s.wait_for(kPoll);
      if (!interrupted || stopped || std::chrono::steady_clock::now() - polled < kPoll) continue;
      polled = std::chrono::steady_clock::now();
      if (interrupted()) {
        stopped = true;
        for (auto& each : streams) each->abort();
      }
    }
  }
  return results;
}

}  // namespace tessera::llm

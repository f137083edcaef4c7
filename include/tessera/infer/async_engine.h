#pragma once
// An Engine driven by its own thread, for concurrent callers such as the HTTP server's handler
// threads: submit() queues a request with a callback that receives its outputs (on the engine
// thread, so it must be quick: hand the output to the caller's queue); the loop steps while any
// request is unfinished and sleeps otherwise.
//
//   infer::AsyncEngine engine(std::make_unique<infer::Engine>(*model, config, tokenizer));
//   int64_t id = engine.submit(prompt, params, [&](const infer::RequestOutput& out) {
//     queue.push(out);
//     return true;  // false aborts the request (e.g. its client went away)
//   });
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "tessera/infer/engine.h"

namespace tessera::infer {

class AsyncEngine {
 public:
  using Callback = std::function<bool(const RequestOutput&)>;

  explicit AsyncEngine(std::unique_ptr<Engine> engine);
  // Stops the loop; unfinished requests get an Abort output.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Queues a request (errors as Engine::add_request) and returns its id.
  int64_t submit(std::vector<int32_t> prompt, const GenerationParams& params, Callback on_output);
  // Drops a request and frees its blocks. No output of a later step is delivered for it; one of
  // the step in flight may still be, from the engine thread after this returns, so a callback
  // must keep alive what it touches (capture shared_ptrs, as the server and llm::LLM do).
  void abort(int64_t id);
  // Engine::embed, between steps.
  std::vector<float> embed(std::span<const int32_t> prompt);
  // Engine::add_lora, between steps.
  int32_t add_lora(const nn::LoraAdapter& adapter);
  // As of the last step, submit or abort (never waits for a running step).
  EngineStats stats() const;
  // The engine's immutable parts (config, runner, tokenizer).
  const Engine& engine() const { return *engine_; }

 private:
  void loop();
  void publish_stats();  // with mutex_ held

  std::unique_ptr<Engine> engine_;
  std::mutex mutex_;  // guards engine_'s mutable state, callbacks_ and stop_
  std::condition_variable wake_;
  std::unordered_map<int64_t, Callback> callbacks_;
  bool stop_ = false;
  mutable std::mutex stats_mutex_;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace tessera::infer

#include "tessera/infer/async_engine.h"

#include <cstdio>
#include <exception>
#include <vector>

namespace tessera::infer {

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  TESSERA_CHECK(engine_ != nullptr, ValueError, "[AsyncEngine] expected an engine, got null");
  stats_ = engine_->stats();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  std::unordered_map<int64_t, Callback> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    left.swap(callbacks_);
  }
  wake_.notify_all();
  thread_.join();
  for (auto& [id, cb] : left) {
    RequestOutput out;
    out.request_id = id;
    out.finish_reason = FinishReason::Abort;
    cb(out);
  }
}

void AsyncEngine::publish_stats() {
  const EngineStats s = engine_->stats();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = s;
}

std::vector<float> AsyncEngine::embed(std::span<const int32_t> prompt) {
  std::lock_guard<std::mutex> lock(mutex_);
  return engine_->embed(prompt);
}

int32_t AsyncEngine::add_lora(const nn::LoraAdapter& adapter) {
  std::lock_guard<std::mutex> lock(mutex_);
  return engine_->add_lora(adapter);
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

int64_t AsyncEngine::submit(std::vector<int32_t> prompt, const GenerationParams& params,
                            Callback on_output) {
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = engine_->add_request(std::move(prompt), params);
    callbacks_.emplace(id, std::move(on_output));
    publish_stats();
  }
  wake_.notify_one();
  return id;
}

void AsyncEngine::abort(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine_->abort_request(id);
  callbacks_.erase(id);
  publish_stats();
}

void AsyncEngine::loop() {
  std::vector<std::pair<RequestOutput, Callback>> ready;
  for (;;) {
    ready.clear();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || engine_->has_unfinished(); });
      if (stop_) return;
      try {
        for (const RequestOutput& out : engine_->step()) {
          auto it = callbacks_.find(out.request_id);
          if (it == callbacks_.end()) continue;
          ready.emplace_back(out, out.finished() ? std::move(it->second) : it->second);
          if (out.finished()) callbacks_.erase(it);
        }
      } catch (const std::exception& e) {
        // Requests are validated on submit, so this is a bug: fail every request, keep serving.
        std::fprintf(stderr, "tessera: engine step failed: %s\n", e.what());
        for (auto& [id, cb] : callbacks_) {
          engine_->abort_request(id);
          RequestOutput out;
          out.request_id = id;
          out.finish_reason = FinishReason::Abort;
          out.error = e.what();
          ready.emplace_back(std::move(out), std::move(cb));
        }
        callbacks_.clear();
      }
      publish_stats();
    }
    // Callbacks run without the lock, so they may submit or abort.
    for (auto& [out, cb] : ready)
      if (!cb(out) && !out.finished()) abort(out.request_id);
  }
}

}  // namespace tessera::infer

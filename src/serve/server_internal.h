#pragma once
// What the server's sources share (not public API): Server::Impl, the channel that hands a
// request's outputs from the engine thread to its HTTP thread, and the reply helpers.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/serve/listener.h"
#include "tessera/serve/metrics.h"
#include "tessera/serve/openai.h"
#include "tessera/serve/server.h"

namespace tessera::serve {
namespace detail {

using Clock = std::chrono::steady_clock;

inline int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

inline void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_json(e));
}

// One request's outputs (of its n or best_of engine requests, the choices), handed from the
// engine thread to the HTTP thread that answers it.
struct RequestChannel {
  struct Output {
    size_t choice;
    infer::RequestOutput out;
  };
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Output> outputs;
  std::vector<int64_t> ids;  // engine request id of each choice
  std::vector<char> done;    // a choice's finishing output is queued: later ones are dropped
  size_t open = 0;           // choices not done
  bool cancelled_by_shutdown = false;
  std::atomic<bool> cancelled{false};
  Clock::time_point arrival = Clock::now();
  // Each choice's last output with tokens: time between tokens is per choice (n choices decode
  // side by side, so gaps between different choices' outputs say nothing).
  std::vector<std::optional<Clock::time_point>> last_token;
  bool seen_any_token = false;  // time to first token: the request's first, of any choice

  explicit RequestChannel(size_t choices) : done(choices, 0), open(choices), last_token(choices) {}

  // On the engine thread: queue the output and time it. False once the client is gone.
  bool push(size_t choice, const infer::RequestOutput& out, Metrics& metrics) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (done[choice]) return false;  // cancelled by a shutdown in the meantime
      if (out.finished()) {
        done[choice] = 1;
        --open;
      }
      outputs.push_back({choice, out});
      if (!out.new_tokens.empty()) {
        const Clock::time_point now = Clock::now();
        if (!seen_any_token)
          metrics.observe_time_to_first_token(std::chrono::duration<double>(now - arrival).count());
        if (last_token[choice])
          metrics.observe_time_between_tokens(
              std::chrono::duration<double>(now - *last_token[choice]).count());
        seen_any_token = true;
        last_token[choice] = now;
      }
    }
    ready.notify_one();
    metrics.count_tokens(0, static_cast<int64_t>(out.new_tokens.size()));
    return !cancelled;
  }

  // Whether every choice's finishing output is queued.
  bool all_done() {
    std::lock_guard<std::mutex> lock(mutex);
    return open == 0;
  }

  // Ends the unfinished choices with an Abort output (the engine's outputs for them are dropped
  // from now on); false when all had already finished.
  bool cancel_for_shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (open == 0) return false;
      cancelled_by_shutdown = true;
      for (size_t c = 0; c < done.size(); ++c) {
        if (done[c]) continue;
        done[c] = 1;
        infer::RequestOutput out;
        out.request_id = ids[c];
        out.finish_reason = infer::FinishReason::Abort;
        outputs.push_back({c, std::move(out)});
      }
      open = 0;
    }
    cancelled = true;
    ready.notify_one();
    return true;
  }

  // Waits up to timeout for outputs and takes them all.
  std::deque<Output> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait_for(lock, timeout, [&] { return !outputs.empty(); });
    std::deque<Output> got;
    got.swap(outputs);
    return got;
  }
};

}  // namespace detail

struct Server::Impl {
  std::shared_ptr<infer::AsyncEngine> engine;
  ServerConfig config;
  ModelLimits limits;
  const tokenizers::Tokenizer* tokenizer;
  // Shared with the engine's callbacks: the engine may outlive the server.
  std::shared_ptr<Metrics> metrics = std::make_shared<Metrics>();
  httplib::Server http;
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> next_id{0};
  Listener listener{http, "[Server]"};
  // Requests submitted to the engine and not yet answered (by their first choice's id), for
  // shutdown() to cancel.
  std::mutex live_mutex;
  std::map<int64_t, std::shared_ptr<detail::RequestChannel>> live;
  std::atomic<bool> draining{false};
  std::mutex shutdown_mutex;  // guards shutdown_deadline
  detail::Clock::time_point shutdown_deadline;

  void routes();
  int64_t cancel_live();
  void completion(const httplib::Request& req, httplib::Response& res, Endpoint ep);
  void embeddings(const httplib::Request& req, httplib::Response& res);
  // Answers 503 while draining or 429 when over the concurrency limit; whether it did.
  bool refused(httplib::Response& res, bool over);
  // Submits each choice of r to the engine; false (after answering res) when one is refused.
  bool submit(const CompletionRequest& r, detail::RequestChannel& channel,
              const std::shared_ptr<detail::RequestChannel>& keep, httplib::Response& res);
};

}  // namespace tessera::serve

#include "tessera/serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollInterval = std::chrono::milliseconds(50);

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_json(e));
}

// One request's outputs, handed from the engine thread to the HTTP thread that answers it.
struct RequestChannel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<infer::RequestOutput> outputs;
  bool finished = false;  // a finishing output is queued: later ones are dropped
  bool cancelled_by_shutdown = false;
  std::atomic<bool> cancelled{false};
  Clock::time_point arrival = Clock::now(), last_token;
  bool seen_token = false;

  // On the engine thread: queue the output and time it. False once the client is gone.
  bool push(const infer::RequestOutput& out, Metrics& metrics) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (finished) return false;  // cancelled by a shutdown in the meantime
      finished = out.finished();
      outputs.push_back(out);
    }
    ready.notify_one();
    if (!out.new_tokens.empty()) {
      const Clock::time_point now = Clock::now();
      if (!seen_token)
        metrics.observe_time_to_first_token(std::chrono::duration<double>(now - arrival).count());
      else
        metrics.observe_time_between_tokens(
            std::chrono::duration<double>(now - last_token).count());
      seen_token = true;
      last_token = now;
      metrics.count_tokens(0, static_cast<int64_t>(out.new_tokens.size()));
    }
    return !cancelled;
  }

  // Ends an unfinished request with an Abort output (the engine's outputs for it are dropped
  // from now on); false when it had already finished.
  bool cancel_for_shutdown(int64_t id) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (finished) return false;
      finished = cancelled_by_shutdown = true;
      infer::RequestOutput out;
      out.request_id = id;
      out.finish_reason = infer::FinishReason::Abort;
      outputs.push_back(std::move(out));
    }
    cancelled = true;
    ready.notify_one();
    return true;
  }

  // Waits up to timeout for outputs and takes them all.
  std::deque<infer::RequestOutput> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait_for(lock, timeout, [&] { return !outputs.empty(); });
    std::deque<infer::RequestOutput> got;
    got.swap(outputs);
    return got;
  }
};

// Folds an output into the response state; returns whether it finished the request.
bool apply(CompletionState& s, const infer::RequestOutput& out, bool accumulate) {
  if (accumulate) {
    s.text += out.text;
    s.token_ids.insert(s.token_ids.end(), out.new_tokens.begin(), out.new_tokens.end());
  } else {
    s.text = out.text;
    s.token_ids = out.new_tokens;
  }
  // A shutdown's Abort output counts no tokens: keep the count so far.
  s.completion_tokens = std::max(s.completion_tokens, out.completion_tokens);
  s.finish_reason = out.finish_reason;
  return out.finished();
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<infer::AsyncEngine> engine;
  ServerConfig config;
  ModelLimits limits;
  const tokenizers::Tokenizer* tokenizer;
  Metrics metrics;
  httplib::Server http;
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> next_id{0};
  bool bound = false;
  int listen_fd = -1;  // the last socket httplib configured: the listening one after bind
  // Requests submitted to the engine and not yet answered, for shutdown() to cancel.
  std::mutex live_mutex;
  std::map<int64_t, std::shared_ptr<RequestChannel>> live;
  std::atomic<bool> draining{false};
  std::mutex shutdown_mutex;  // guards shutdown_deadline
  Clock::time_point shutdown_deadline;

  void routes();
  int64_t cancel_live();
  void completion(const httplib::Request& req, httplib::Response& res, Endpoint ep);
};

Server::Server(std::shared_ptr<infer::AsyncEngine> engine, ServerConfig config)
    : impl_(std::make_unique<Impl>()) {
  TESSERA_CHECK(engine != nullptr && engine->engine().tokenizer() != nullptr, ValueError,
                "[Server] expected an engine with a tokenizer");
  std::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  s.engine = std::move(engine);
  s.config = std::move(config);
  s.tokenizer = s.engine->engine().tokenizer();
  const infer::Engine& e = s.engine->engine();
  s.limits.max_model_len =
      std::min(e.runner().max_seq_len(), e.config().num_blocks * e.config().block_size);
  s.limits.vocab_size = e.runner().vocab_size();
  // Each stream holds a worker thread until it ends: one per allowed request, plus a few for
  // the cheap endpoints (and to answer 429 when the limit is reached).
  const size_t threads = static_cast<size_t>(s.config.max_concurrent_requests) + 4;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(s.config.max_body_bytes);
  s.http.set_socket_options([&s](socket_t sock) {
    httplib::default_socket_options(sock);
    s.listen_fd = sock;
  });
  s.routes();
}

Server::~Server() { stop(); }

const Metrics& Server::metrics() const { return impl_->metrics; }

int Server::bind() {
  Impl& s = *impl_;
  if (s.config.port == 0) {
    s.config.port = s.http.bind_to_any_port(s.config.host);
    TESSERA_CHECK(s.config.port > 0, RuntimeError, "[Server] could not bind ", s.config.host);
  } else {
    TESSERA_CHECK(s.http.bind_to_port(s.config.host, s.config.port), RuntimeError,
                  "[Server] could not bind ", s.config.host, ":", s.config.port);
  }
  // httplib listens with a backlog of 5: a burst of clients (32 streams at once) overflows it
  // and the kernel drops their handshakes. Listening again on Linux just resizes the queue.
  if (s.listen_fd >= 0) ::listen(s.listen_fd, SOMAXCONN);
  s.bound = true;
  return s.config.port;
}

void Server::run() {
  if (!impl_->bound) bind();
  impl_->http.listen_after_bind();
}

void Server::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

int64_t Server::in_flight() const { return impl_->in_flight; }

int64_t Server::Impl::cancel_live() {
  std::vector<std::pair<int64_t, std::shared_ptr<RequestChannel>>> open;
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    open.assign(live.begin(), live.end());
  }
  int64_t n = 0;
  for (auto& [id, channel] : open)
    if (channel->cancel_for_shutdown(id)) {
      engine->abort(id);
      ++n;
    }
  return n;
}

ShutdownSummary Server::shutdown(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  const Clock::time_point start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(s.shutdown_mutex);
    if (s.draining) {
      s.shutdown_deadline = std::min(s.shutdown_deadline, start + grace);
      return {};
    }
    s.draining = true;
    s.shutdown_deadline = start + grace;
  }
  ShutdownSummary summary;
  summary.in_flight = s.in_flight;
  auto past_deadline = [&s] {
    std::lock_guard<std::mutex> lock(s.shutdown_mutex);
    return Clock::now() >= s.shutdown_deadline;
  };
  constexpr auto kStep = std::chrono::milliseconds(5);
  while (s.in_flight > 0 && !past_deadline()) std::this_thread::sleep_for(kStep);
  // A request that passed the 503 check as the drain began registers late: cancel until none
  // is left. A stream whose client stopped reading ends within the write timeout (5 s).
  const Clock::time_point hard_deadline = Clock::now() + std::chrono::seconds(15);
  while (s.in_flight > 0 && Clock::now() < hard_deadline) {
    summary.cancelled += s.cancel_live();
    std::this_thread::sleep_for(kStep);
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stop();
  return summary;
}

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty() || req.path.rfind("/v1/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + config.api_key) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401,
                             auth.empty() ? "Missing API key: pass 'Authorization: Bearer <key>'"
                                          : "Incorrect API key provided",
                             "", "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad HTTP) get JSON too.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, ApiError(404, "Not found: " + req.method + " " + req.path, "",
                               "invalid_request_error", "not_found"));
    else if (res.status == 413)
      send_error(res, ApiError(413, tessera::detail::str("request body larger than ",
                                                         config.max_body_bytes, " bytes")));
    else
      send_error(res, ApiError(res.status, "bad request"));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, what, "", "server_error"));
      });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    static const std::set<std::string> known{"/v1/completions", "/v1/chat/completions",
                                             "/v1/models", "/health", "/metrics"};
    metrics.count_request(known.count(req.path) ? req.path : "other", res.status);
  });

  // Load balancers stop routing here once a shutdown has begun.
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining)
      send_json(res, 503, R"({"status":"shutting_down"})");
    else
      send_json(res, 200, R"({"status":"ok"})");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(engine->stats()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, models_json(config.model_name, unix_time(), limits.max_model_len));
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(req, res, Endpoint::Completions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(req, res, Endpoint::ChatCompletions);
  });
}

void Server::Impl::completion(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
  // Counts this request in flight until its response (or stream) is done.
  const bool over = ++in_flight > config.max_concurrent_requests;
  std::shared_ptr<void> slot(nullptr, [this](void*) { --in_flight; });
  if (draining)
    return send_error(
        res, ApiError(503, "the server is shutting down", "", "server_error", "shutting_down"));
  if (over)
    return send_error(res, ApiError(429, "too many concurrent requests", "", "rate_limit_error",
                                    "rate_limit_exceeded"));
  CompletionRequest r;
  int64_t id;
  auto channel = std::make_shared<RequestChannel>();
  try {
    r = parse_request(ep, req.body, *tokenizer, limits);
    id = engine->submit(r.prompt, r.params, [channel, this](const infer::RequestOutput& out) {
      return channel->push(out, metrics);
    });
  } catch (const ApiError& e) {
    return send_error(res, e);
  } catch (const Error& e) {  // the engine's own validation
    return send_error(res, ApiError(400, e.what()));
  }
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.emplace(id, channel);
  }
  // Unregisters the request once its response (or stream) is done.
  std::shared_ptr<void> registered(nullptr, [this, id](void*) {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.erase(id);
  });
  metrics.count_tokens(static_cast<int64_t>(r.prompt.size()), 0);
  CompletionState state;
  state.id = (ep == Endpoint::Completions ? "cmpl-" : "chatcmpl-") + std::to_string(next_id++);
  state.created = unix_time();
  state.model = config.model_name;
  state.prompt_tokens = static_cast<int64_t>(r.prompt.size());

  if (!r.stream) {
    for (bool done = false; !done;)
      for (const infer::RequestOutput& out : channel->take(kPollInterval))
        done = apply(state, out, /*accumulate=*/true) || done;
    if (channel->cancelled_by_shutdown)
      return send_error(res, ApiError(503, "the server shut down before the request finished", "",
                                      "server_error", "shutting_down"));
    return send_json(res, 200, response_json(ep, state));
  }

  res.set_header("Cache-Control", "no-cache");
  std::shared_ptr<infer::AsyncEngine> eng = engine;
  auto cancel = [channel, eng, id] {
    channel->cancelled = true;
    eng->abort(id);
  };
  res.set_chunked_content_provider(
      "text/event-stream",
      [channel, state, ep, include_usage = r.include_usage, cancel, slot, registered, first = true](
          size_t, httplib::DataSink& sink) mutable {
        for (const infer::RequestOutput& out : channel->take(kPollInterval)) {
          const bool done = apply(state, out, /*accumulate=*/false);
          if (!done && out.text.empty() && out.new_tokens.empty()) continue;
          std::string events = stream_event(ep, state, first);
          first = false;
          if (done) {
            if (include_usage) events += usage_event(ep, state);
            events += kStreamDone;
          }
          if (!sink.write(events.data(), events.size())) {
            cancel();
            return false;
          }
          if (done) {
            sink.done();
            return true;
          }
        }
        if (!sink.is_writable()) {
          cancel();
          return false;
        }
        return true;
      },
      [cancel](bool success) {
        if (!success) cancel();
      });
}

}  // namespace tessera::serve

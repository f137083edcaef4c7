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
  Clock::time_point arrival = Clock::now(), last_token;
  bool seen_token = false;

  explicit RequestChannel(size_t choices) : done(choices, 0), open(choices) {}

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
        if (!seen_token)
          metrics.observe_time_to_first_token(std::chrono::duration<double>(now - arrival).count());
        else
          metrics.observe_time_between_tokens(
              std::chrono::duration<double>(now - last_token).count());
        seen_token = true;
        last_token = now;
      }
    }
    ready.notify_one();
    metrics.count_tokens(0, static_cast<int64_t>(out.new_tokens.size()));
    return !cancelled;
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

// Where each choice of a request stands, beside what its response shows.
struct ChoiceProgress {
  int32_t last_token = -1;  // for the leading space of the next logprob token
  int64_t tokens = 0;       // generated so far
};

// Folds an output into its choice (accumulating for a response, replacing for a stream chunk);
// returns whether it finished the choice.
bool apply(CompletionState& s, std::vector<ChoiceProgress>& progress,
           const RequestChannel::Output& o, const tokenizers::Tokenizer& tokenizer,
           bool accumulate) {
  Choice& c = s.choices[o.choice];
  ChoiceProgress& p = progress[o.choice];
  const infer::RequestOutput& out = o.out;
  if (!accumulate) {
    for (const LogprobEntry& e : c.logprobs) c.text_offset += static_cast<int64_t>(e.token.size());
    c.text.clear();
    c.token_ids.clear();
    c.logprobs.clear();
  }
  c.text += out.text;
  c.token_ids.insert(c.token_ids.end(), out.new_tokens.begin(), out.new_tokens.end());
  for (const infer::TokenLogprob& t : out.logprobs) c.cumulative_logprob += t.logprob;
  if (s.logprobs) {
    const std::vector<LogprobEntry> e = logprob_entries(out.logprobs, tokenizer, p.last_token);
    c.logprobs.insert(c.logprobs.end(), e.begin(), e.end());
  }
  if (!out.new_tokens.empty()) p.last_token = out.new_tokens.back();
  // A shutdown's Abort output counts no tokens: keep the count so far.
  s.completion_tokens += std::max<int64_t>(0, out.completion_tokens - p.tokens);
  p.tokens = std::max(p.tokens, out.completion_tokens);
  c.finish_reason = out.finish_reason;
  return out.finished();
}

// best_of: keeps the n choices with the highest cumulative logprob, renumbered 0..n-1 in that
// order, and counts only their tokens in usage (as vLLM does).
void keep_best(CompletionState& s, const std::vector<ChoiceProgress>& progress, size_t n) {
  std::vector<size_t> order(s.choices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return s.choices[a].cumulative_logprob > s.choices[b].cumulative_logprob;
  });
  std::vector<Choice> best;
  s.completion_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    best.push_back(std::move(s.choices[order[i]]));
    best.back().index = static_cast<int64_t>(i);
    s.completion_tokens += progress[order[i]].tokens;
  }
  s.choices = std::move(best);
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
  // Requests submitted to the engine and not yet answered (by their first choice's id), for
  // shutdown() to cancel.
  std::mutex live_mutex;
  std::map<int64_t, std::shared_ptr<RequestChannel>> live;
  std::atomic<bool> draining{false};
  std::mutex shutdown_mutex;  // guards shutdown_deadline
  Clock::time_point shutdown_deadline;

  void routes();
  int64_t cancel_live();
  void completion(const httplib::Request& req, httplib::Response& res, Endpoint ep);
  void embeddings(const httplib::Request& req, httplib::Response& res);
  // Answers 503 while draining or 429 when over the concurrency limit; whether it did.
  bool refused(httplib::Response& res, bool over);
  // Submits each choice of r to the engine; false (after answering res) when one is refused.
  bool submit(const CompletionRequest& r, RequestChannel& channel,
              const std::shared_ptr<RequestChannel>& keep, httplib::Response& res);
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
  TESSERA_CHECK(!s.config.model_names.empty(), ValueError,
                "[Server] expected at least one served model name");
  s.limits.served_names = s.config.model_names;
  s.limits.chat_template = s.config.chat_template;
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
    if (channel->cancel_for_shutdown()) {
      for (int64_t choice_id : channel->ids) engine->abort(choice_id);
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
    static const std::set<std::string> known{
        "/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/embeddings",
        "/tokenize",       "/detokenize",          "/health",    "/metrics"};
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
    send_json(res, 200, models_json(config.model_names, unix_time(), limits.max_model_len));
  });
  // vLLM's tokenizer endpoints (no /v1 prefix, so no API key, as in vLLM).
  auto tokenizer_route = [this](auto render) {
    return [this, render](const httplib::Request& req, httplib::Response& res) {
      try {
        send_json(res, 200, render(req.body, *tokenizer, limits));
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const Error& e) {  // the tokenizer's own validation
        send_error(res, ApiError(400, e.what()));
      }
    };
  };
  http.Post("/v1/embeddings",
            [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res); });
  http.Post("/tokenize", tokenizer_route(tokenize_json));
  http.Post("/detokenize", tokenizer_route(detokenize_json));
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
  if (refused(res, over)) return;
  CompletionRequest r;
  try {
    r = parse_request(ep, req.body, *tokenizer, limits);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  const size_t choices = static_cast<size_t>(r.best_of);
  auto channel = std::make_shared<RequestChannel>(choices);
  if (!submit(r, *channel, channel, res)) return;
  const int64_t id = channel->ids.front();
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
  state.model = r.model;
  state.logprobs = r.logprobs >= 0;
  state.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  state.choices.resize(choices);
  for (size_t c = 0; c < choices; ++c) state.choices[c].index = static_cast<int64_t>(c);
  std::vector<ChoiceProgress> progress(choices);

  if (!r.stream) {
    // Each choice ends with exactly one finishing output (the engine's or a shutdown's Abort).
    for (size_t open = choices; open > 0;)
      for (const RequestChannel::Output& o : channel->take(kPollInterval))
        open -= apply(state, progress, o, *tokenizer, /*accumulate=*/true);
    if (channel->cancelled_by_shutdown)
      return send_error(res, ApiError(503, "the server shut down before the request finished", "",
                                      "server_error", "shutting_down"));
    if (r.best_of > r.n) keep_best(state, progress, static_cast<size_t>(r.n));
    return send_json(res, 200, response_json(ep, state));
  }

  res.set_header("Cache-Control", "no-cache");
  std::shared_ptr<infer::AsyncEngine> eng = engine;
  auto cancel = [channel, eng] {
    channel->cancelled = true;
    for (int64_t choice_id : channel->ids) eng->abort(choice_id);
  };
  res.set_chunked_content_provider(
      "text/event-stream",
      [channel, state, progress, ep, include_usage = r.include_usage, cancel, slot, registered,
       tok = tokenizer, first = std::vector<char>(choices, 1),
       open = choices](size_t, httplib::DataSink& sink) mutable {
        for (const RequestChannel::Output& o : channel->take(kPollInterval)) {
          const bool done = apply(state, progress, o, *tok, /*accumulate=*/false);
          if (!done && o.out.text.empty() && o.out.new_tokens.empty()) continue;
          std::string events = stream_event(ep, state, o.choice, first[o.choice]);
          first[o.choice] = 0;
          open -= done;
          if (open == 0) {
            if (include_usage) events += usage_event(ep, state);
            events += kStreamDone;
          }
          if (!sink.write(events.data(), events.size())) {
            cancel();
            return false;
          }
          if (open == 0) {
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

bool Server::Impl::refused(httplib::Response& res, bool over) {
  const bool drain = draining;
  if (drain)
    send_error(res,
               ApiError(503, "the server is shutting down", "", "server_error", "shutting_down"));
  else if (over)
    send_error(res, ApiError(429, "too many concurrent requests", "", "rate_limit_error",
                             "rate_limit_exceeded"));
  return drain || over;
}

void Server::Impl::embeddings(const httplib::Request& req, httplib::Response& res) {
  // Counted in flight like completions: each input is a forward on the engine's thread.
  const bool over = ++in_flight > config.max_concurrent_requests;
  std::shared_ptr<void> slot(nullptr, [this](void*) { --in_flight; });
  if (refused(res, over)) return;
  try {
    const EmbeddingRequest r = parse_embedding_request(req.body, *tokenizer, limits);
    std::vector<std::vector<float>> vectors;
    for (const std::vector<int32_t>& ids : r.inputs) vectors.push_back(engine->embed(ids));
    send_json(res, 200, embeddings_json(r, vectors));
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {  // the engine's own validation (a model on a device)
    send_error(res, ApiError(400, e.what()));
  }
}

bool Server::Impl::submit(const CompletionRequest& r, RequestChannel& channel,
                          const std::shared_ptr<RequestChannel>& keep, httplib::Response& res) {
  try {
    // ids is read only by this thread until the request is registered in live.
    for (size_t c = 0; c < static_cast<size_t>(r.best_of); ++c)
      channel.ids.push_back(engine->submit(r.prompt, r.choice_params(static_cast<int64_t>(c)),
                                           [keep, c, this](const infer::RequestOutput& out) {
                                             return keep->push(c, out, metrics);
                                           }));
    return true;
  } catch (const Error& e) {  // the engine's own validation
    for (int64_t id : channel.ids) engine->abort(id);
    send_error(res, ApiError(400, e.what()));
    return false;
  }
}

}  // namespace tessera::serve

#include "tessera/serve/server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "serve/server_internal.h"
#include "tessera/core/error.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

using namespace detail;

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
      std::min(e.config().max_model_len, e.config().num_blocks * e.config().block_size);
  s.limits.vocab_size = e.runner().vocab_size();
  TESSERA_CHECK(!s.config.model_names.empty(), ValueError,
                "[Server] expected at least one served model name");
  s.limits.served_names = s.config.model_names;
  for (const LoraModule& m : s.config.lora_modules) {
    const bool clash =
        s.limits.lora_ids.contains(m.name) ||
        std::ranges::find(s.config.model_names, m.name) != s.config.model_names.end();
    TESSERA_CHECK(!clash && m.id >= 1 && m.id <= e.runner().num_loras(), ValueError,
                  "[Server] expected LoRA modules of distinct new names and ids the engine "
                  "registered (1 to ",
                  e.runner().num_loras(), "), got '", m.name, "' with id ", m.id);
    s.limits.lora_ids.emplace(m.name, m.id);
  }
  s.limits.chat_template = s.config.chat_template;
  s.limits.tool_call_parser = s.config.tool_call_parser;
  s.limits.reasoning_parser = s.config.reasoning_parser;
  s.limits.generation = s.config.generation_config;
  // Each stream holds a worker thread until it ends: one per allowed request, plus a few for
  // the cheap endpoints (and to answer 429 when the limit is reached).
  const size_t threads = static_cast<size_t>(s.config.max_concurrent_requests) + 4;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(s.config.max_body_bytes);
  s.routes();
}

Server::~Server() {
  // Streams still open are aborted in the engine, which may outlive the server.
  impl_->cancel_live();
  stop();
}

const Metrics& Server::metrics() const { return *impl_->metrics; }

int Server::bind() {
  Impl& s = *impl_;
  s.config.port = s.listener.bind(s.config.host, s.config.port);
  return s.config.port;
}

void Server::run() {
  if (impl_->listener.stop_requested()) return;
  bind();  // keeps the port chosen for 0 in the config
  impl_->listener.run(impl_->config.host, impl_->config.port);
}

void Server::stop() { impl_->listener.stop(); }

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

namespace {

// Whether req declares a body of at most `limit` bytes (a 413 for it came from another limit).
bool declared_within(const httplib::Request& req, size_t limit) {
  const std::string length = req.get_header_value("Content-Length");
  char* end = nullptr;
  return !length.empty() && std::strtoull(length.c_str(), &end, 10) <= limit && *end == '\0';
}

}  // namespace

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
    else if (res.status == 413 && declared_within(req, config.max_body_bytes) &&
             req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded"))
      // httplib caps form-encoded bodies itself (CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH).
      send_error(res, ApiError(413,
                               "form-encoded request bodies are limited to 8192 bytes; send "
                               "the request as JSON (Content-Type: application/json)"));
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
    metrics->count_request(known.count(req.path) ? req.path : "other", res.status);
  });

  // Load balancers stop routing here once a shutdown has begun.
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining)
      send_json(res, 503, R"({"status":"shutting_down"})");
    else
      send_json(res, 200, R"({"status":"ok"})");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics->render(engine->stats()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(
        res, 200,
        models_json(config.model_names, config.lora_modules, unix_time(), limits.max_model_len));
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

}  // namespace tessera::serve

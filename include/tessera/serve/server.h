#pragma once
// The OpenAI-compatible HTTP server (cpp-httplib) over an AsyncEngine:
//   POST /v1/embeddings                               (mean-pooled final hidden state)
//   POST /v1/completions, POST /v1/chat/completions   (JSON, or server-sent events with
//                                                      "stream": true, ending "data: [DONE]")
//   POST /tokenize, POST /detokenize                  (vLLM's shapes; no API key, as in vLLM)
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text)
// Completions may ask for n choices (each streamed with its own index), best_of, logprobs and
// the rest serve/openai.h lists.
// Bad requests get a 4xx body in OpenAI's error shape ({"error": {"message", "type", "param",
// "code"}}) and the server keeps serving: malformed JSON, unknown fields, wrong types, prompts
// longer than the context, max_tokens out of range, bodies over max_body_bytes (413), a missing
// or wrong API key when one is set (401, /v1 routes only), a model not served (404
// model_not_found), more than max_concurrent_requests at
// once (429), unknown routes (404). A streaming client that disconnects has its request aborted,
// which frees its KV blocks.
//
// shutdown() drains: new completions get 503 while those in flight run to their end for up to
// a grace period; the rest are then cancelled (a stream ends with finish_reason "abort" and
// data: [DONE], a plain request gets 503) before run() returns.
//
//   auto engine = std::make_shared<infer::AsyncEngine>(
//       std::make_unique<infer::Engine>(*model, engine_config, tokenizer));
//   serve::Server server(engine, {.port = 8000, .api_key = "secret"});
//   server.run();  // until server.stop() from another thread
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/infer/async_engine.h"
#include "tessera/serve/metrics.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (Server::bind returns it)
  std::string api_key;  // empty: no authentication
  // The names /v1/models lists and "model" may use (vLLM's --served-model-name aliases); a
  // request for another gets 404 model_not_found, one without "model" uses the first.
  std::vector<std::string> model_names = {"tessera"};
  // LoRA adapters already registered in the engine (Engine::add_lora), served under their own
  // names (vLLM's --lora-modules): /v1/models lists them with the base model as parent, and a
  // completion naming one runs through it.
  std::vector<LoraModule> lora_modules;
  size_t max_body_bytes = size_t{1} << 20;
  // Requests in flight at once (a stream holds an HTTP thread until it ends); more get 429.
  int64_t max_concurrent_requests = 64;
  // The model's Hugging Face chat template (serve::load_chat_template); null: the plain one.
  std::shared_ptr<const ChatTemplate> chat_template;
  // The model's tool-call format (vLLM's --enable-auto-tool-choice --tool-call-parser): chat
  // requests with tools may then leave tool_choice "auto", and the model's calls come back as
  // tool_calls; null: "auto" is a 400.
  std::optional<ToolCallFormat> tool_call_parser;
  // How the model marks its thinking (vLLM's --reasoning-parser): chat messages then carry it as
  // reasoning_content apart from the content; null: it stays in the content.
  std::optional<ReasoningFormat> reasoning_parser;
  // The model's generation_config.json (vLLM's --generation-config auto): the sampling defaults
  // of requests that set none, and more ids that end a reply.
  infer::GenerationConfig generation_config;
};

struct ShutdownSummary {
  int64_t in_flight = 0;  // completions in flight when the shutdown began
  int64_t cancelled = 0;  // of those, cancelled when the grace ran out
  double seconds = 0.0;   // from the call until run() was told to stop
};

class Server {
 public:
  // The engine must have a tokenizer (ValueError otherwise). Ignores SIGPIPE process-wide: a
  // client that disconnects mid-stream must not kill the server.
  Server(std::shared_ptr<infer::AsyncEngine> engine, ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket and returns its port; RuntimeError when it cannot.
  int bind();
  // Serves until stop(), binding first if needed; returns at once if stop() came first.
  void run();
  // Stops run() (from another thread, before or after it started) at once, cutting open streams
  // and aborting their requests in the engine; safe to call more than once. Destroy the server
  // only after run() has returned.
  void stop();
  // Graceful stop (from another thread): refuses new completions (503), waits up to grace for
  // those in flight, cancels the rest, then stop(). Returns once they have all ended. A call
  // made while another is waiting shortens its grace and returns an empty summary at once.
  ShutdownSummary shutdown(std::chrono::milliseconds grace);
  // Completion requests (and streams) not yet answered in full.
  int64_t in_flight() const;
  const Metrics& metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve

#pragma once
// The OpenAI server for tests: a serve::Server on a free loopback port with its own thread, the
// stories260K model and tokenizer from the shared data, and a streaming client that parses the
// server-sent events (optionally hanging up early or reading slowly). Header-only: only the
// test binaries that link cpp-httplib include it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/infer/async_engine.h"
#include "tessera/infer/model_loader.h"
#include "tessera/serve/server.h"
#include "tessera/tokenizers/llama2c_tokenizer.h"
#include "testing/shared_data.h"

namespace tessera::testing {

// A server on a free port, running on its own thread for the test's lifetime.
struct TestServer {
  std::shared_ptr<infer::AsyncEngine> engine;
  std::unique_ptr<serve::Server> server;
  std::thread thread;
  int port = 0;

  // loras are registered in the engine in order (ids 1, 2, ...) for sc.lora_modules to name.
  TestServer(const models::CausalLM& model, std::shared_ptr<tokenizers::Tokenizer> tokenizer,
             const infer::EngineConfig& ec, serve::ServerConfig sc = {},
             const std::vector<nn::LoraAdapter>& loras = {}) {
    auto e = std::make_unique<infer::Engine>(model, ec, tokenizer);
    for (const nn::LoraAdapter& lora : loras) e->add_lora(lora);
    engine = std::make_shared<infer::AsyncEngine>(std::move(e));
    sc.port = 0;
    sc.model_names = {"test-model"};
    server = std::make_unique<serve::Server>(engine, sc);
    port = server->bind();
    thread = std::thread([this] { server->run(); });
    // Serving once /health answers.
    for (int i = 0; i < 500; ++i) {
      if (auto res = client().Get("/health"); res && res->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~TestServer() { stop(); }
  // Stops the server and waits for run() to return.
  void stop() {
    server->stop();
    if (thread.joinable()) thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  // A metric's value from /metrics.
  double metric(const std::string& name) const {
    auto res = client().Get("/metrics");
    std::smatch m;
    std::regex re("\n" + name + " ([0-9.e+-]+)\n");
    if (!res || !std::regex_search(res->body, m, re)) return -1;
    return std::stod(m[1]);
  }
};

// POSTs body as JSON: the status and the parsed reply (-1 and null when no reply came).
inline std::pair<int, nlohmann::json> post_json(const TestServer& ts, const std::string& path,
                                                const nlohmann::json& body) {
  auto res = ts.client().Post(path, body.dump(), "application/json");
  if (!res) return {-1, nlohmann::json()};
  return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
}

struct Stories {
  std::shared_ptr<models::CausalLM> model;
  std::shared_ptr<tokenizers::Tokenizer> tokenizer;
};

// The stories260K model and tokenizer, loaded once per test binary; null when missing.
inline const Stories* stories() {
  static const Stories s = [] {
    Stories st;
    const std::string model = shared_data_path("stories260K.bin").string();
    const std::string tok = shared_data_path("stories260K_idtok.bin").string();
    if (std::filesystem::exists(model) && std::filesystem::exists(tok)) {
      st.model = infer::load_model(model);
      st.tokenizer = std::make_shared<tokenizers::Llama2cTokenizer>(tok);
    }
    return st;
  }();
  return s.model ? &s : nullptr;
}

#define STORIES_OR_SKIP(var)                                              \
  const ::tessera::testing::Stories* var = ::tessera::testing::stories(); \
  if (var == nullptr) GTEST_SKIP() << "shared data missing: stories260K.bin / _idtok.bin"

// One streamed completion: the concatenated token ids and text, the finish reason and usage.
struct StreamResult {
  int status = 0;
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
  nlohmann::json usage;
  bool done = false;  // saw data: [DONE]
  int events = 0;
  std::string object;  // the events' "object" ("text_completion", "chat.completion.chunk")
  std::string error;   // transport error or malformed event, empty when none
  std::string api_error;  // the message of an error event (OpenAI's shape), empty when none
  std::vector<nlohmann::json> deltas;  // chat chunks' choices[].delta, in order
};

struct StreamOptions {
  int hang_up_after = 0;  // > 0: close the connection after this many events
  // > 0: a receive buffer this small and a pause per read, so the server's writes block.
  int slow_rcvbuf = 0;
  std::chrono::milliseconds slow_pause{0};
  std::function<void()> on_event;  // called after each event is parsed
};

// Streams a /v1/completions or /v1/chat/completions request (body["stream"] must be true).
inline StreamResult stream_completion(int port, const nlohmann::json& body,
                                      const StreamOptions& opt = {},
                                      const std::string& path = "/v1/completions") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  if (opt.slow_rcvbuf > 0)
    c.set_socket_options([size = opt.slow_rcvbuf](socket_t sock) {
      ::setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    });
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  StreamResult r;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (opt.slow_pause.count() > 0) std::this_thread::sleep_for(opt.slow_pause);
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) {
        r.error = "not a data event: " + event;
        return false;
      }
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        r.done = true;
        continue;
      }
      ++r.events;
      const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_object() && j.contains("error") && j["error"].is_object()) {
        r.api_error = j["error"].value("message", "");
        continue;
      }
      if (!j.is_object() || !j.contains("choices")) {
        r.error = "malformed event: " + payload;
        return false;
      }
      r.object = j.value("object", "");
      if (j.contains("usage")) r.usage = j["usage"];
      for (const nlohmann::json& ch : j["choices"]) {
        if (ch.contains("text")) r.text += ch["text"].get<std::string>();
        if (ch.contains("delta")) r.deltas.push_back(ch["delta"]);
        for (const nlohmann::json& t : ch["token_ids"]) r.tokens.push_back(t.get<int32_t>());
        if (!ch["finish_reason"].is_null()) r.finish_reason = ch["finish_reason"];
      }
      if (opt.on_event) opt.on_event();
      if (opt.hang_up_after > 0 && r.events >= opt.hang_up_after) return false;
    }
    return true;
  };
  auto res = c.send(req);
  r.status = res ? res->status : -1;
  if (!res && opt.hang_up_after == 0 && r.error.empty())
    r.error = "HTTP error: " + httplib::to_string(res.error());
  return r;
}

}  // namespace tessera::testing

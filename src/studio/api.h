#pragma once
// What the studio's route files share: the server state, JSON replies and errors, and input
// validation that names the field at fault.
#include <httplib.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/serve/listener.h"
#include "tessera/studio/studio.h"

namespace tessera::studio {

using Json = nlohmann::json;

// An error with its HTTP status (the exception handler turns it into the JSON error body).
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

// The stop button of one generation: a flag read at each token, and the upstream connection shut
// down so that a service sending nothing (a long prefill, a hung child) cannot hold the chat.
class ChatStop {
 public:
  void request() {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_ = true;
    if (client_) client_->stop();
  }
  bool requested() const { return requested_; }
  // request() also stops this client while it is attached; false when a stop came first.
  bool attach(httplib::Client* client) {
    std::lock_guard<std::mutex> lock(mutex_);
    client_ = client;
    return !requested_;
  }

 private:
  std::mutex mutex_;
  std::atomic<bool> requested_{false};
  httplib::Client* client_ = nullptr;
};

struct Studio::Impl {
  StudioConfig config;
  Database db;
  httplib::Server http;
  serve::Listener listener{http, "[studio]"};
  // Generations in flight, by conversation id, with their stop buttons.
  std::mutex chats_mutex;
  std::map<int64_t, std::shared_ptr<ChatStop>> chats;
  // Start/stop of one service at a time (a double click must not start two children).
  std::mutex services_mutex;

  explicit Impl(StudioConfig c);
};

void reply(httplib::Response& res, const Json& body, int status = 200);
// The request body as a JSON object (400 otherwise).
Json body_object(const httplib::Request& req, const std::string& where);
// A required string field, non-empty and at most max_len bytes.
std::string required_string(const Json& body, const std::string& key, const std::string& where,
                            size_t max_len = 4096);
// An optional integer field within [lo, hi] (fallback when absent).
int64_t optional_int(const Json& body, const std::string& key, int64_t fallback, int64_t lo,
                     int64_t hi, const std::string& where);
// The numeric path parameter matches[1].
int64_t path_id(const httplib::Request& req);
// The query parameter key as a non-negative integer (fallback when absent; 400 when malformed).
int64_t query_int(const httplib::Request& req, const std::string& key, int64_t fallback,
                  const std::string& where);
// DELETE /api/<table>/<id>: 404 for an unknown id, else {"deleted": id}.
void add_delete_route(Studio::Impl& s, const std::string& table);
// The row, or 404 "[where] expected an existing <what> id, got <id>".
Json existing(Database& db, const std::string& table, int64_t id, const std::string& where);

void add_catalog_routes(Studio::Impl& s);  // accelerators, models, runs, benchmarks, overview
void add_service_routes(Studio::Impl& s);  // services
void add_chat_routes(Studio::Impl& s);     // conversations, messages, chat streaming
void add_static_routes(Studio::Impl& s);   // the embedded front end
// Brings services back after a restart (adopt live children, restart those that died).
void restore_services(Studio::Impl& s);

// Prometheus text as JSON: {"<name>": value} for plain samples, {"<name>": {"<le>": count}} for
// histogram buckets (name without _bucket), labelled counters summed.
Json parse_prometheus(const std::string& text);

}  // namespace tessera::studio

// Conversations kept on the server, and chat through a service: the studio streams the
// service's /v1/chat/completions to the browser as its own events, measures TTFT and tokens/s,
// stores both messages, and cancels the request in the engine when the stop button is pressed
// or the browser goes away (closing the upstream connection aborts the request in `serve`).
#include <chrono>

#include "api.h"
#include "tessera/core/json_parse.h"

namespace tessera::studio {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxContent = 64 * 1024;

std::string sse(const Json& event) {
  return "data: " + event.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

// What a reply's text is held to (settings.output): free text, any JSON object, or what
// settings.output_spec says, a JSON Schema, a regular expression or a GBNF grammar.
bool known_output(const Json& v) {
  return v == "text" || v == "json_object" || v == "json_schema" || v == "regex" || v == "grammar";
}

// The JSON Schema of settings.output_spec.
Json output_schema(const Json& settings) {
  const Json schema = parse_json(settings.value("output_spec", ""));
  if (!schema.is_object() && !schema.is_boolean())
    throw HttpError(400,
                    "[studio.chat] expected settings.output_spec to be a JSON Schema (a JSON "
                    "object) for output json_schema");
  return schema;
}

// Sampling settings a conversation may carry; anything else is refused by name.
Json checked_settings(const Json& settings) {
  if (!settings.is_object())
    throw HttpError(400, "[studio.chat] expected 'settings' to be an object, got " +
                             settings.dump().substr(0, 60));
  for (const auto& [k, v] : settings.items()) {
    const bool text = k == "system" || k == "output_spec";
    const bool known = text || k == "temperature" || k == "top_p" || k == "max_tokens" ||
                       k == "seed" || k == "ignore_eos" || k == "output";
    if (!known)
      throw HttpError(400,
                      "[studio.chat] expected settings among temperature, top_p, "
                      "max_tokens, seed, ignore_eos, system, output, output_spec, got '" +
                          k + "'");
    const char* type = text                ? "string"
                       : k == "ignore_eos" ? "boolean"
                       : k == "output"     ? "one of text, json_object, json_schema, regex, grammar"
                                           : "number";
    const bool ok = text                ? v.is_string()
                    : k == "ignore_eos" ? v.is_boolean()
                    : k == "output"     ? known_output(v)
                                        : v.is_number();
    if (!ok)
      throw HttpError(400, "[studio.chat] expected settings." + k + " to be " +
                               (k == "output" ? "" : "a ") + type + ", got " +
                               v.dump().substr(0, 60));
  }
  if (settings.value("output", "") == "json_schema" && settings.contains("output_spec"))
    output_schema(settings);
  return settings;
}

// The fields of a /v1/chat/completions request that hold its text to settings.output.
Json output_fields(const Json& settings) {
  const std::string output = settings.value("output", "text");
  if (output == "json_object") return {{"response_format", {{"type", "json_object"}}}};
  if (output == "json_schema")
    return {{"response_format",
             {{"type", "json_schema"},
              {"json_schema", {{"name", "studio"}, {"schema", output_schema(settings)}}}}}};
  if (output == "regex" || output == "grammar")
    return {{"structured_outputs", {{output, settings.value("output_spec", "")}}}};
  return Json::object();
}

Json conversation(Studio::Impl& s, int64_t id) {
  Json c = existing(s.db, "conversations", id, "studio.conversations");
  c["messages"] = s.db.query("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", {id});
  return c;
}

// One generation: registered so /stop can find it, unregistered when it ends.
struct ActiveChat {
  ActiveChat(Studio::Impl& s, int64_t id) : s(s), id(id), cancel(std::make_shared<ChatStop>()) {
    std::lock_guard<std::mutex> lock(s.chats_mutex);
    if (s.chats.count(id))
      throw HttpError(409, "[studio.chat] expected no generation in flight in conversation " +
                               std::to_string(id) + ", got one (stop it first)");
    s.chats[id] = cancel;
  }
  // Lets the conversation's next reply start; only this one's registration, once.
  void release() {
    std::lock_guard<std::mutex> lock(s.chats_mutex);
    if (const auto it = s.chats.find(id); it != s.chats.end() && it->second == cancel)
      s.chats.erase(it);
  }
  ~ActiveChat() { release(); }
  Studio::Impl& s;
  int64_t id;
  std::shared_ptr<ChatStop> cancel;
};

// Keeps a client attached to a stop button for its lifetime.
struct Attached {
  Attached(ChatStop& stop, httplib::Client& client) : stop(stop), live(stop.attach(&client)) {}
  ~Attached() { stop.attach(nullptr); }
  ChatStop& stop;
  const bool live;  // false: stopped before the request was sent
};

// Streams the service's answer into sink ({"delta"} events, and {"reasoning"} ones for a
// reasoning model's thinking); returns the assistant message's stats.
Json stream_reply(const Json& service, const Json& request, ChatStop& cancel,
                  httplib::DataSink& sink, std::string& text, std::string& reasoning) {
  httplib::Client c("127.0.0.1", static_cast<int>(service["port"].get<int64_t>()));
  c.set_read_timeout(600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = request.dump();
  req.set_header("Content-Type", "application/json");
  const Clock::time_point start = Clock::now();
  Clock::time_point first{}, last{};
  int64_t tokens = 0;
  std::string buffer, finish = "", error;
  bool gone = false;
  int status = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    if (status != 200) return true;  // an error body: read whole, reported below
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (!event.starts_with("data: ") || event == "data: [DONE]") continue;
      const Json j = parse_json(event.substr(6));
      if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) continue;
      const Json& ch = j["choices"][0];
      const Json d = ch.value("delta", Json::object());
      // null when absent: a thinking chunk carries "content": null.
      const auto field = [&](const char* key) {
        return d.contains(key) && d[key].is_string() ? d[key].get<std::string>() : "";
      };
      const std::string delta = field("content"), thought = field("reasoning_content");
      if (ch.contains("finish_reason") && ch["finish_reason"].is_string())
        finish = ch["finish_reason"];
      if (delta.empty() && thought.empty()) continue;
      last = Clock::now();
      if (tokens++ == 0) first = last;
      text += delta;
      reasoning += thought;
      const double ttft = std::chrono::duration<double>(first - start).count();
      Json relayed = {{"delta", delta}, {"tokens", tokens}, {"ttft_s", ttft}};
      if (!thought.empty()) relayed["reasoning"] = thought;
      const std::string out = sse(relayed);
      if (!sink.is_writable() || !sink.write(out.data(), out.size())) gone = true;
    }
    return !gone && !cancel.requested();
  };
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  const Attached attached(cancel, c);
  httplib::Result res =
      attached.live ? c.send(req) : httplib::Result(nullptr, httplib::Error::Canceled);
  if (status != 0 && status != 200) {
    const Json body = parse_json(buffer);
    error = "the service answered " + std::to_string(status) + ": " +
            (body.is_object() && body.contains("error") ? body["error"].value("message", "")
                                                        : buffer.substr(0, 200));
  }
  if (!res && error.empty() && !cancel.requested() && !gone)
    error = "the service could not be reached: " + httplib::to_string(res.error());
  const double ttft = tokens ? std::chrono::duration<double>(first - start).count() : 0.0;
  const double decode = tokens > 1 ? std::chrono::duration<double>(last - first).count() : 0.0;
  return {{"tokens", tokens},
          {"ttft_s", ttft},
          {"tokens_per_s", decode > 0 ? static_cast<double>(tokens - 1) / decode : 0.0},
          {"elapsed_s", std::chrono::duration<double>(Clock::now() - start).count()},
          {"finish_reason", cancel.requested() || gone ? "cancelled" : finish},
          {"error", error.empty() ? Json(nullptr) : Json(error)}};
}

void chat(Studio::Impl& s, const httplib::Request& req, httplib::Response& res) {
  const int64_t id = path_id(req);
  const Json conv = conversation(s, id);
  const Json body = body_object(req, "studio.chat");
  const std::string content = required_string(body, "content", "studio.chat", kMaxContent);
  if (conv["service_id"].is_null())
    throw HttpError(409, "[studio.chat] expected the conversation to have a service, got none");
  const Json service = existing(s.db, "services", conv["service_id"], "studio.chat");
  if (service["state"] != "running")
    throw HttpError(409, "[studio.chat] expected service '" + service["name"].get<std::string>() +
                             "' to be running, got " + service["state"].get<std::string>());
  Json settings = conv["settings"].is_object() ? conv["settings"] : Json::object();
  if (body.contains("settings")) settings.update(checked_settings(body["settings"]));

  Json messages = Json::array();
  if (settings.contains("system") && !settings["system"].get<std::string>().empty())
    messages.push_back({{"role", "system"}, {"content", settings["system"]}});
  for (const Json& m : conv["messages"])
    messages.push_back({{"role", m["role"]}, {"content", m["content"]}});
  messages.push_back({{"role", "user"}, {"content", content}});
  Json request = {{"messages", messages}, {"stream", true}};
  for (const char* k : {"temperature", "top_p", "max_tokens", "seed", "ignore_eos"})
    if (settings.contains(k)) request[k] = settings[k];
  request.update(output_fields(settings));

  auto active = std::make_shared<ActiveChat>(s, id);  // 409 when one is in flight
  s.db.insert("INSERT INTO messages (conversation_id, role, content) VALUES (?, 'user', ?)",
              {id, content});
  // A reopened conversation shows the settings it was last answered with.
  if (body.contains("settings"))
    s.db.change("UPDATE conversations SET settings_json = ? WHERE id = ?", {settings.dump(), id});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&s, id, service, request, active](size_t, httplib::DataSink& sink) {
        // Outside httplib's exception handler: an escaping exception would end the studio, so
        // a failure (a malformed reply, a busy database) ends the stream with it instead.
        std::string text, reasoning;
        Json message;
        try {
          Json stats = stream_reply(service, request, *active->cancel, sink, text, reasoning);
          const int64_t mid = s.db.insert(
              "INSERT INTO messages (conversation_id, role, content, reasoning, stats_json) "
              "VALUES (?, 'assistant', ?, ?, ?)",
              {id, text, reasoning, stats.dump()});
          message = s.db.row("SELECT * FROM messages WHERE id = ?", {mid});
        } catch (const std::exception& e) {
          message = {{"role", "assistant"},
                     {"content", text},
                     {"reasoning", reasoning},
                     {"stats", {{"error", std::string("the reply was not stored: ") + e.what()}}}};
        }
        // Before the done event: a client may send the next message as soon as it has it (the
        // response itself ends, and this registration would go, a moment later).
        active->release();
        const std::string done = sse({{"done", true}, {"message", message}});
        if (sink.is_writable()) sink.write(done.data(), done.size());
        sink.done();
        return true;
      },
      [active](bool) {});  // keeps the registration until the stream is released
}

}  // namespace

void add_chat_routes(Studio::Impl& s) {
  Database& db = s.db;
  s.http.Get("/api/conversations", [&db](const httplib::Request&, httplib::Response& res) {
    reply(res, db.query("SELECT c.*, (SELECT count(*) FROM messages m WHERE m.conversation_id "
                        "= c.id) AS message_count FROM conversations c ORDER BY c.id DESC"));
  });
  s.http.Get(R"(/api/conversations/(\d+))",
             [&s](const httplib::Request& req, httplib::Response& res) {
               reply(res, conversation(s, path_id(req)));
             });
  s.http.Get(R"(/api/conversations/(\d+)/export)",
             [&s](const httplib::Request& req, httplib::Response& res) {
               res.set_header("Content-Disposition", "attachment; filename=\"conversation-" +
                                                         std::to_string(path_id(req)) + ".json\"");
               reply(res, {{"format", "tessera-studio-conversation/1"},
                           {"conversation", conversation(s, path_id(req))}});
             });
  s.http.Post("/api/conversations", [&db](const httplib::Request& req, httplib::Response& res) {
    const std::string where = "studio.conversations";
    const Json body = body_object(req, where);
    const std::string title =
        body.contains("title") ? required_string(body, "title", where, 200) : "New chat";
    const int64_t service = optional_int(body, "service_id", 0, 1, INT64_MAX, where);
    if (service) existing(db, "services", service, where);
    const Json settings = checked_settings(body.value("settings", Json::object()));
    const int64_t id =
        db.insert("INSERT INTO conversations (title, service_id, settings_json) VALUES (?, ?, ?)",
                  {title, service ? Json(service) : Json(nullptr), settings.dump()});
    reply(res, existing(db, "conversations", id, where), 201);
  });
  s.http.Patch(
      R"(/api/conversations/(\d+))", [&s](const httplib::Request& req, httplib::Response& res) {
        const std::string where = "studio.conversations";
        const int64_t id = path_id(req);
        existing(s.db, "conversations", id, where);
        const Json body = body_object(req, where);
        if (body.contains("title"))
          s.db.change("UPDATE conversations SET title = ? WHERE id = ?",
                      {required_string(body, "title", where, 200), id});
        if (body.contains("settings"))
          s.db.change("UPDATE conversations SET settings_json = ? WHERE id = ?",
                      {checked_settings(body["settings"]).dump(), id});
        if (body.contains("service_id")) {
          const int64_t service = optional_int(body, "service_id", 0, 1, INT64_MAX, where);
          existing(s.db, "services", service, where);
          s.db.change("UPDATE conversations SET service_id = ? WHERE id = ?", {service, id});
        }
        reply(res, conversation(s, id));
      });
  s.http.Delete(R"(/api/conversations/(\d+))", [&s](const httplib::Request& req,
                                                    httplib::Response& res) {
    const int64_t id = path_id(req);
    existing(s.db, "conversations", id, "studio.conversations");
    {
      // Its reply is stored when it ends: under a reused id it would land in another chat.
      std::lock_guard<std::mutex> lock(s.chats_mutex);
      if (s.chats.count(id))
        throw HttpError(409, "[studio.conversations] expected no reply streaming in conversation " +
                                 std::to_string(id) + ", got one (stop it first)");
      s.db.change("DELETE FROM conversations WHERE id = ?", {id});
    }
    reply(res, {{"deleted", id}});
  });
  s.http.Post(R"(/api/conversations/(\d+)/chat)",
              [&s](const httplib::Request& req, httplib::Response& res) { chat(s, req, res); });
  // The stop button: the generation ends at its next token, and `serve` frees its KV blocks.
  s.http.Post(R"(/api/conversations/(\d+)/stop)",
              [&s](const httplib::Request& req, httplib::Response& res) {
                std::lock_guard<std::mutex> lock(s.chats_mutex);
                const auto it = s.chats.find(path_id(req));
                if (it != s.chats.end()) it->second->request();
                reply(res, {{"stopped", it != s.chats.end()}});
              });
}

}  // namespace tessera::studio

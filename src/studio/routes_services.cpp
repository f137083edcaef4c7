// Services: `tessera serve` children on chosen ports, started, stopped, restarted, their logs and
// their /metrics as JSON; their state is kept in the database so a studio restart finds them.
#include <filesystem>

#include "api.h"
#include "tessera/studio/process.h"

namespace tessera::studio {
namespace fs = std::filesystem;

namespace {

constexpr auto kStartTimeout = std::chrono::seconds(120);  // loading a large model takes a while
constexpr auto kStopGrace = std::chrono::seconds(10);
constexpr size_t kLogTail = 64 * 1024;
// A service that does not answer /health this quickly is shown "unresponsive" (the probe runs on
// every listing, which the services page polls).
constexpr auto kHealthTimeout = std::chrono::milliseconds(500);

std::string log_path(const Studio::Impl& s, int64_t id) {
  return (fs::path(s.config.data_dir) / "logs" / ("service_" + std::to_string(id) + ".log"))
      .string();
}

Json service_row(Studio::Impl& s, int64_t id) {
  return existing(s.db, "services", id, "studio.services");
}

// Whether the recorded pid is still this service's `tessera serve` (a pid can be reused).
bool still_serving(const Json& row) {
  const int pid = static_cast<int>(row["pid"].get<int64_t>());
  if (!process_alive(pid)) return false;
  const std::string cmd = process_command_line(pid);
  return cmd.find(" serve ") != std::string::npos &&
         cmd.find("--port " + std::to_string(row["port"].get<int64_t>()) + " ") !=
             std::string::npos;
}

// The row with its state checked against the process (a dead child becomes "exited") and, while
// it runs, what its /health answers.
Json refreshed(Studio::Impl& s, Json row) {
  if (row["state"] == "running" && !still_serving(row)) {
    // Only the process this row saw: a start() since (another thread) recorded a new one.
    if (s.db.change("UPDATE services SET state = 'exited', pid = 0 "
                    "WHERE id = ? AND state = 'running' AND pid = ?",
                    {row["id"], row["pid"]}) == 0)
      return refreshed(s, service_row(s, row["id"].get<int64_t>()));
    row["state"] = "exited";
    row["pid"] = 0;
  }
  const int port = static_cast<int>(row["port"].get<int64_t>());
  row["url"] = "http://127.0.0.1:" + std::to_string(port);
  row["health"] = row["state"] == "running" ? Json(probe_health(port, kHealthTimeout)) : Json();
  return row;
}

std::vector<std::string> serve_argv(const Studio::Impl& s, const Json& service, const Json& model) {
  std::vector<std::string> argv = {s.config.tessera_bin,
                                   "serve",
                                   "--model",
                                   model["path"],
                                   "--host",
                                   "127.0.0.1",
                                   "--port",
                                   std::to_string(service["port"].get<int64_t>()),
                                   "--served-model-name",
                                   model["name"]};
  if (!model["tokenizer"].get<std::string>().empty())
    argv.insert(argv.end(), {"--tokenizer", model["tokenizer"]});
  for (const Json& a : service["args"]) argv.push_back(a);
  return argv;
}

Json start(Studio::Impl& s, int64_t id) {
  std::lock_guard<std::mutex> lock(s.services_mutex);
  Json row = refreshed(s, service_row(s, id));
  if (row["state"] == "running") return row;
  const Json model = existing(s.db, "models", row["model_id"], "studio.services");
  const int pid = spawn_process(serve_argv(s, row, model), log_path(s, id));
  s.db.change(
      "UPDATE services SET pid = ?, state = 'running', desired = 'running', started_at = "
      "strftime('%Y-%m-%dT%H:%M:%SZ', 'now') WHERE id = ?",
      {pid, id});
  if (!wait_healthy(static_cast<int>(row["port"].get<int64_t>()), pid, kStartTimeout)) {
    stop_process(pid, std::chrono::seconds(1));
    s.db.change("UPDATE services SET state = 'exited', pid = 0 WHERE id = ?", {id});
    throw HttpError(500, "[studio.services] expected service " + std::to_string(id) +
                             " to answer /health, got no answer; its log ends:\n" +
                             tail_file(log_path(s, id), 2000));
  }
  return refreshed(s, service_row(s, id));
}

// stop() with services_mutex held.
Json stop_locked(Studio::Impl& s, int64_t id) {
  Json row = refreshed(s, service_row(s, id));
  if (row["state"] == "running")
    stop_process(static_cast<int>(row["pid"].get<int64_t>()), kStopGrace);
  s.db.change("UPDATE services SET state = 'stopped', desired = 'stopped', pid = 0 WHERE id = ?",
              {id});
  return refreshed(s, service_row(s, id));
}

Json stop(Studio::Impl& s, int64_t id) {
  std::lock_guard<std::mutex> lock(s.services_mutex);
  return stop_locked(s, id);
}

// Whether a serve option is one the studio sets itself (serve keeps an option's last value, so
// a user's --host would expose the key-less serve API beyond the loopback).
bool studio_owned(const std::string& arg) {
  static const char* kOwned[] = {
      "--model", "--host", "--port", "--tokenizer", "--served-model-name", "--api-key"};
  const std::string name = arg.substr(0, arg.find('='));
  return std::find(std::begin(kOwned), std::end(kOwned), name) != std::end(kOwned);
}

Json checked_args(const Json& body) {
  const Json args = body.value("args", Json::array());
  bool ok = args.is_array() && args.size() <= 32;
  for (const Json& a : args)
    ok = ok && a.is_string() && a.get<std::string>().starts_with("--") &&
         !studio_owned(a.get<std::string>());
  if (!ok)
    throw HttpError(400,
                    "[studio.services] expected 'args' to be a list of --options for "
                    "tessera serve other than --model, --host, --port, --tokenizer, "
                    "--served-model-name and --api-key (the studio sets them), got " +
                        args.dump().substr(0, 80));
  return args;
}

}  // namespace

void restore_services(Studio::Impl& s) {
  for (const Json& row : s.db.query("SELECT * FROM services")) {
    const Json now = refreshed(s, row);
    if (now["state"] != "running" && row["desired"] == "running") {
      try {
        start(s, row["id"]);
      } catch (const std::exception&) {
        // Left "exited" with its log; the services page shows it.
      }
    }
  }
}

void add_service_routes(Studio::Impl& s) {
  s.http.Get("/api/services", [&s](const httplib::Request&, httplib::Response& res) {
    Json rows = s.db.query("SELECT * FROM services ORDER BY id");
    for (Json& r : rows) r = refreshed(s, r);
    reply(res, rows);
  });
  s.http.Get(R"(/api/services/(\d+))", [&s](const httplib::Request& req, httplib::Response& res) {
    reply(res, refreshed(s, service_row(s, path_id(req))));
  });
  s.http.Post("/api/services", [&s](const httplib::Request& req, httplib::Response& res) {
    const std::string where = "studio.services";
    const Json body = body_object(req, where);
    const int64_t model_id = optional_int(body, "model_id", -1, 1, INT64_MAX, where);
    if (model_id < 0)
      throw HttpError(400, "[studio.services] expected 'model_id' (a registered model), got none");
    existing(s.db, "models", model_id, where);
    int64_t port = optional_int(body, "port", 0, 0, 65535, where);
    if (port == 0) port = free_port();
    if (!s.db.query("SELECT id FROM services WHERE port = ?", {port}).empty())
      throw HttpError(409, "[studio.services] expected a port no other service uses, got " +
                               std::to_string(port));
    const int64_t id = s.db.insert(
        "INSERT INTO services (name, model_id, port, args_json) VALUES (?, ?, ?, ?)",
        {required_string(body, "name", where, 200), model_id, port, checked_args(body).dump()});
    reply(res, refreshed(s, service_row(s, id)), 201);
  });
  s.http.Post(R"(/api/services/(\d+)/start)",
              [&s](const httplib::Request& req, httplib::Response& res) {
                reply(res, start(s, path_id(req)));
              });
  s.http.Post(R"(/api/services/(\d+)/stop)",
              [&s](const httplib::Request& req, httplib::Response& res) {
                reply(res, stop(s, path_id(req)));
              });
  s.http.Post(R"(/api/services/(\d+)/restart)",
              [&s](const httplib::Request& req, httplib::Response& res) {
                stop(s, path_id(req));
                reply(res, start(s, path_id(req)));
              });
  s.http.Delete(R"(/api/services/(\d+))",
                [&s](const httplib::Request& req, httplib::Response& res) {
                  // One step: a start() in between would leave a process without a row.
                  std::lock_guard<std::mutex> lock(s.services_mutex);
                  stop_locked(s, path_id(req));
                  s.db.change("DELETE FROM services WHERE id = ?", {path_id(req)});
                  reply(res, {{"deleted", path_id(req)}});
                });
  s.http.Get(R"(/api/services/(\d+)/logs)",
             [&s](const httplib::Request& req, httplib::Response& res) {
               service_row(s, path_id(req));
               reply(res, {{"log", tail_file(log_path(s, path_id(req)), kLogTail)}});
             });
  // The service's Prometheus metrics as JSON (the page polls it for its charts).
  s.http.Get(
      R"(/api/services/(\d+)/metrics)", [&s](const httplib::Request& req, httplib::Response& res) {
        const Json row = refreshed(s, service_row(s, path_id(req)));
        if (row["state"] != "running")
          throw HttpError(409, "[studio.services] expected a running service, got " +
                                   row["state"].get<std::string>());
        httplib::Client c("127.0.0.1", static_cast<int>(row["port"].get<int64_t>()));
        c.set_read_timeout(5, 0);
        auto r = c.Get("/metrics");
        if (!r || r->status != 200)
          throw HttpError(502, "[studio.services] expected /metrics from the service, got " +
                                   (r ? std::to_string(r->status) : httplib::to_string(r.error())));
        reply(res, parse_prometheus(r->body));
      });
}

}  // namespace tessera::studio

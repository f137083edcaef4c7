// The studio's server: authentication, JSON errors and the helpers the route files share.
#include "tessera/studio/studio.h"
#include "tessera/core/json_parse.h"

#include <arpa/inet.h>

#include <filesystem>
#include <limits>

#include "api.h"
#include "tessera/core/error.h"

namespace tessera::studio {
namespace fs = std::filesystem;

namespace {

// Request bodies (benchmark uploads are the largest, a few MB).
constexpr size_t kMaxBodyBytes = size_t{64} << 20;

bool changes_state(const std::string& method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

std::string error_body(const std::string& message, int status) {
  return Json{{"error", {{"message", message}, {"status", status}}}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

// The name part of a Host header or a bind address: "[::1]:8080" -> "::1", "a.b:80" -> "a.b".
std::string host_name(const std::string& host) {
  if (host.starts_with("[")) return host.substr(1, host.find(']') - 1);
  const size_t colon = host.find(':');
  return colon != std::string::npos && host.find(':', colon + 1) == std::string::npos
             ? host.substr(0, colon)
             : host;  // no port, or a bare IPv6 address
}

// localhost, 127.0.0.0/8 or ::1 (addresses parsed: "127.0.0.1.evil.example" is a name).
bool is_loopback(const std::string& name) {
  in_addr v4{};
  in6_addr v6{};
  return name == "localhost" ||
         (inet_pton(AF_INET, name.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) ||
         (inet_pton(AF_INET6, name.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6));
}

// A page of another site whose DNS name was rebound to 127.0.0.1 reaches a loopback studio with
// its own name in Host, and could read conversations (reads need no key). A studio bound to
// loopback therefore answers only requests addressed to a loopback name, as Jupyter does.
bool host_allowed(const StudioConfig& c, const httplib::Request& req) {
  if (!is_loopback(host_name(c.host))) return true;  // served to the network on purpose
  const std::string host = req.get_header_value("Host");
  return host.empty() || is_loopback(host_name(host));
}

StudioConfig checked(StudioConfig c) {
  if (c.api_key.empty())
    throw ValueError("[studio] expected an API key (--api-key or TESSERA_STUDIO_KEY), got none");
  fs::create_directories(fs::path(c.data_dir) / "logs");
  return c;
}

}  // namespace

Studio::Impl::Impl(StudioConfig c)
    : config(checked(std::move(c))), db((fs::path(config.data_dir) / "studio.db").string()) {}

void reply(httplib::Response& res, const Json& body, int status) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

Json body_object(const httplib::Request& req, const std::string& where) {
  Json body = parse_json(req.body);
  if (!body.is_object())
    throw HttpError(
        400, "[" + where + "] expected a JSON object body, got '" + req.body.substr(0, 60) + "'");
  return body;
}

std::string required_string(const Json& body, const std::string& key, const std::string& where,
                            size_t max_len) {
  const auto it = body.find(key);
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty() ||
      it->get<std::string>().size() > max_len)
    throw HttpError(400, "[" + where + "] expected '" + key +
                             "' to be a non-empty string of at most " + std::to_string(max_len) +
                             " bytes, got " +
                             (it == body.end() ? "nothing" : it->dump().substr(0, 60)));
  return it->get<std::string>();
}

int64_t optional_int(const Json& body, const std::string& key, int64_t fallback, int64_t lo,
                     int64_t hi, const std::string& where) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
    throw HttpError(400, "[" + where + "] expected '" + key + "' to be an integer in [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                             it->dump().substr(0, 60));
  return it->get<int64_t>();
}

int64_t path_id(const httplib::Request& req) {
  const std::string id = req.matches[1].str();
  if (id.size() > 15)  // beyond any rowid this studio hands out, and beyond int64 when longer
    throw HttpError(404, "[studio] expected an existing id, got " + id.substr(0, 30));
  return std::stoll(id);
}

int64_t query_int(const httplib::Request& req, const std::string& key, int64_t fallback,
                  const std::string& where) {
  if (!req.has_param(key.c_str())) return fallback;
  const std::string v = req.get_param_value(key.c_str());
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12)
    throw HttpError(
        400, "[" + where + "] expected '" + key + "' to be an integer >= 0, got '" + v + "'");
  return std::stoll(v);
}

void add_delete_route(Studio::Impl& s, const std::string& table) {
  s.http.Delete("/api/" + table + R"(/(\d+))",
                [&s, table](const httplib::Request& req, httplib::Response& res) {
                  existing(s.db, table, path_id(req), "studio." + table);
                  s.db.change("DELETE FROM " + table + " WHERE id = ?", {path_id(req)});
                  reply(res, {{"deleted", path_id(req)}});
                });
}

Json existing(Database& db, const std::string& table, int64_t id, const std::string& where) {
  Json row = db.row("SELECT * FROM " + table + " WHERE id = ?", {id});
  if (row.is_null())
    throw HttpError(404, "[" + where + "] expected an existing id, got " + std::to_string(id));
  return row;
}

Studio::Studio(StudioConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  Impl& s = *impl_;
  // Streams hold a worker each for their whole length: more workers than the default 8.
  s.http.new_task_queue = [] { return new httplib::ThreadPool(32); };
  // httplib reads any body whole (routed or not, before the login check): bounded.
  s.http.set_payload_max_length(kMaxBodyBytes);
  s.http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!host_allowed(s.config, req)) {
      res.status = 403;
      res.set_content(error_body("[studio] expected a request to localhost or 127.0.0.1 (the "
                                 "studio listens on " +
                                     s.config.host + "), got one for Host '" +
                                     req.get_header_value("Host").substr(0, 100) + "'",
                                 403),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!req.path.starts_with("/api/") || !changes_state(req.method) || req.path == "/api/login")
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + s.config.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    res.set_content(error_body("[studio] expected 'Authorization: Bearer <studio API key>' on " +
                                   req.method + " " + req.path + ", got " +
                                   (req.has_header("Authorization") ? "a wrong key" : "none"),
                               401),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        int status = 500;
        std::string message = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const HttpError& e) {
          status = e.status, message = e.what();
        } catch (const ValueError& e) {
          // The database reports duplicates as constraint failures.
          message = e.what();
          status = message.find("constraint failed") != std::string::npos ? 409 : 400;
        } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
          status = 400, message = e.what();
        } catch (const std::exception& e) {
          message = e.what();
        }
        res.status = status;
        res.set_content(error_body(message, status), "application/json");
      });
  s.http.Post("/api/login", [&s](const httplib::Request& req, httplib::Response& res) {
    const Json body = body_object(req, "studio.login");
    if (body.value("api_key", "") != s.config.api_key)
      throw HttpError(401, "[studio.login] expected the studio's API key, got a wrong one");
    reply(res, {{"ok", true}});
  });
  add_catalog_routes(s);
  add_service_routes(s);
  add_chat_routes(s);
  add_static_routes(s);
  s.http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty())
      res.set_content(
          error_body("[studio] expected a known route, got " + req.method + " " + req.path, 404),
          "application/json");
  });
  restore_services(s);
}

Studio::~Studio() = default;

int Studio::bind() { return impl_->listener.bind(impl_->config.host, impl_->config.port); }

void Studio::run() { impl_->listener.run(impl_->config.host, impl_->config.port); }

void Studio::stop() { impl_->listener.stop(); }

Database& Studio::db() { return impl_->db; }

}  // namespace tessera::studio

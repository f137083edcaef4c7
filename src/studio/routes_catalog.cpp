// The studio's catalogue: accelerators (with measured `tessera bench hardware` figures),
// models on disk, training run folders and benchmark results.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "api.h"
#include "tessera/core/error.h"
#include "tessera/studio/inspect.h"

namespace tessera::studio {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB: larger is a typo

// This machine's CPU as /proc describes it: (model name, memory bytes).
std::pair<std::string, int64_t> this_cpu() {
  std::ifstream cpuinfo("/proc/cpuinfo"), meminfo("/proc/meminfo");
  std::string line, model = "CPU";
  while (std::getline(cpuinfo, line))
    if (line.starts_with("model name")) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  int64_t kib = 0;
  while (std::getline(meminfo, line))
    if (line.starts_with("MemTotal:")) kib = std::stoll(line.substr(9));
  return {model, kib * 1024};
}

// The measured figures for an accelerator: the newest hardware bench tied to it, else the
// newest whose machine is its model (the CPU or one of the GPUs).
Json measured(Database& db, const Json& acc) {
  for (const Json& b :
       db.query("SELECT id, accelerator_id, body_json FROM benchmarks WHERE suite = 'hardware' "
                "ORDER BY date DESC, id DESC")) {
    bool match = b["accelerator_id"] == acc["id"];
    const Json& m = b["body"]["machine"];
    if (b["accelerator_id"].is_null()) {
      match = m.value("cpu_model", "") == acc["model"];
      for (const Json& g : m.value("gpus", Json::array()))
        match = match || g.value("name", "") == acc["model"];
    }
    if (match) {
      Json s = hardware_summary(b["body"]);
      s["benchmark_id"] = b["id"];
      return s;
    }
  }
  return nullptr;
}

Json compute_object(const Json& body) {
  const Json c = body.value("compute", Json::object());
  if (!c.is_object())
    throw HttpError(400,
                    "[studio.accelerators] expected 'compute' to be an object {dtype: "
                    "FLOP/s}, got " +
                        c.dump().substr(0, 60));
  for (const auto& [dtype, flops] : c.items())
    if (!flops.is_number() || flops.get<double>() < 0)
      throw HttpError(400, "[studio.accelerators] expected compute." + dtype +
                               " to be a FLOP/s number >= 0, got " + flops.dump().substr(0, 60));
  return c;
}

Json model_row(Database& db, int64_t id) { return existing(db, "models", id, "studio.models"); }

std::string run_name(const Json& body, const std::string& path) {
  if (body.contains("name")) return required_string(body, "name", "studio.runs", 200);
  return fs::path(path).lexically_normal().filename().string();
}

void add_accelerator_routes(Studio::Impl& s) {
  Database& db = s.db;
  s.http.Get("/api/accelerators", [&db](const httplib::Request&, httplib::Response& res) {
    Json rows = db.query("SELECT * FROM accelerators ORDER BY id");
    for (Json& r : rows) r["measured"] = measured(db, r);
    reply(res, rows);
  });
  s.http.Post("/api/accelerators", [&db](const httplib::Request& req, httplib::Response& res) {
    const Json body = body_object(req, "studio.accelerators");
    const std::string where = "studio.accelerators";
    const int64_t id = db.insert(
        "INSERT INTO accelerators (brand, model, memory_bytes, bandwidth_bytes_per_s, "
        "compute_json) VALUES (?, ?, ?, ?, ?)",
        {required_string(body, "brand", where, 100), required_string(body, "model", where, 200),
         optional_int(body, "memory_bytes", 0, 0, kMaxBytes, where),
         optional_int(body, "bandwidth_bytes_per_s", 0, 0, kMaxBytes, where),
         compute_object(body).dump()});
    reply(res, existing(db, "accelerators", id, where), 201);
  });
  // Registers this machine's CPU once (the overview's first-run button).
  s.http.Post("/api/accelerators/detect", [&db](const httplib::Request&, httplib::Response& res) {
    const auto [model, memory] = this_cpu();
    Json row = db.row("SELECT * FROM accelerators WHERE model = ?", {model});
    if (row.is_null()) {
      const int64_t id =
          db.insert("INSERT INTO accelerators (brand, model, memory_bytes) VALUES ('CPU', ?, ?)",
                    {model, memory});
      row = existing(db, "accelerators", id, "studio.accelerators");
    }
    reply(res, row);
  });
  add_delete_route(s, "accelerators");
}

void add_model_routes(Studio::Impl& s) {
  Database& db = s.db;
  s.http.Get("/api/models", [&db](const httplib::Request&, httplib::Response& res) {
    reply(res, db.query("SELECT * FROM models ORDER BY id"));
  });
  s.http.Get(R"(/api/models/(\d+))", [&db](const httplib::Request& req, httplib::Response& res) {
    reply(res, model_row(db, path_id(req)));
  });
  s.http.Post("/api/models", [&db](const httplib::Request& req, httplib::Response& res) {
    const std::string where = "studio.models";
    const Json body = body_object(req, where);
    const std::string path = fs::absolute(required_string(body, "path", where)).string();
    std::string tokenizer;
    if (body.contains("tokenizer")) {
      tokenizer = fs::absolute(required_string(body, "tokenizer", where)).string();
      if (!fs::is_regular_file(tokenizer))
        throw HttpError(400, "[studio.models] expected 'tokenizer' to be an existing file, got '" +
                                 tokenizer + "'");
    }
    const Json info = inspect_model(path);
    const std::string name = body.contains("name")
                                 ? required_string(body, "name", where, 200)
                                 : fs::path(path).lexically_normal().stem().string();
    if (tokenizer.empty()) tokenizer = info["tokenizer"];
    const int64_t id = db.insert(
        "INSERT INTO models (name, path, format, arch, parameters, dtype, memory_bytes, "
        "kv_bytes_per_token, context_length, config_json, tokenizer) VALUES (?, ?, ?, ?, ?, ?, ?, "
        "?, ?, ?, ?)",
        {name, path, info["format"], info["arch"], info["parameters"], info["dtype"],
         info["memory_bytes"], info["kv_bytes_per_token"], info["context_length"],
         info["config"].dump(), tokenizer});
    reply(res, model_row(db, id), 201);
  });
  s.http.Delete(R"(/api/models/(\d+))", [&db](const httplib::Request& req, httplib::Response& res) {
    model_row(db, path_id(req));
    if (!db.query("SELECT id FROM services WHERE model_id = ?", {path_id(req)}).empty())
      throw HttpError(409, "[studio.models] expected a model no service uses, got model " +
                               std::to_string(path_id(req)) + " with services: delete them first");
    db.change("DELETE FROM models WHERE id = ?", {path_id(req)});
    reply(res, {{"deleted", path_id(req)}});
  });
}

void add_run_routes(Studio::Impl& s) {
  Database& db = s.db;
  s.http.Get("/api/runs", [&db](const httplib::Request&, httplib::Response& res) {
    reply(res, db.query("SELECT * FROM runs ORDER BY id"));
  });
  // ?after=N: only metrics from line N on (the page polls while training writes).
  s.http.Get(R"(/api/runs/(\d+))", [&db](const httplib::Request& req, httplib::Response& res) {
    Json row = existing(db, "runs", path_id(req), "studio.runs");
    const int64_t after = query_int(req, "after", 0, "studio.runs");
    Json run = read_run(row["path"], after);
    run.update(row);
    reply(res, run);
  });
  s.http.Post("/api/runs", [&db](const httplib::Request& req, httplib::Response& res) {
    const Json body = body_object(req, "studio.runs");
    const std::string path = fs::absolute(required_string(body, "path", "studio.runs")).string();
    read_run(path, 0);  // a folder, or ValueError
    const int64_t id =
        db.insert("INSERT INTO runs (name, path) VALUES (?, ?)", {run_name(body, path), path});
    reply(res, existing(db, "runs", id, "studio.runs"), 201);
  });
  add_delete_route(s, "runs");
}

void add_benchmark_routes(Studio::Impl& s) {
  Database& db = s.db;
  s.http.Get("/api/benchmarks", [&db](const httplib::Request&, httplib::Response& res) {
    reply(res, db.query("SELECT id, suite, date, commit_sha, command, accelerator_id, created_at, "
                        "json_array_length(body_json, '$.figures') AS figures "
                        "FROM benchmarks ORDER BY date DESC, id DESC"));
  });
  s.http.Get(R"(/api/benchmarks/(\d+))",
             [&db](const httplib::Request& req, httplib::Response& res) {
               reply(res, existing(db, "benchmarks", path_id(req), "studio.benchmarks"));
             });
  s.http.Get("/api/benchmarks/compare", [&db](const httplib::Request& req, httplib::Response& res) {
    auto side = [&](const char* k) {
      const int64_t id = query_int(req, k, -1, "studio.benchmarks");
      if (id < 0)
        throw HttpError(400, std::string("[studio.benchmarks] expected '") + k +
                                 "' (a benchmark id), got none");
      return existing(db, "benchmarks", id, "studio.benchmarks");
    };
    const Json a = side("a"), b = side("b");
    reply(res, {{"a", a["id"]}, {"b", b["id"]}, {"figures", compare_bench(a["body"], b["body"])}});
  });
  // The body is a bench result as `tessera bench` writes it; ?accelerator_id= ties it to one.
  s.http.Post("/api/benchmarks", [&db](const httplib::Request& req, httplib::Response& res) {
    const Json body = body_object(req, "studio.benchmarks");
    validate_bench(body);
    Json accelerator = nullptr;
    if (const int64_t a = query_int(req, "accelerator_id", -1, "studio.benchmarks"); a >= 0)
      accelerator = existing(db, "accelerators", a, "studio.benchmarks")["id"];
    const int64_t id = db.insert(
        "INSERT INTO benchmarks (suite, date, commit_sha, command, body_json, accelerator_id) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        {body["suite"], body.value("date", ""), body.value("commit", ""), body.value("command", ""),
         body.dump(), accelerator});
    reply(res, existing(db, "benchmarks", id, "studio.benchmarks"), 201);
  });
  add_delete_route(s, "benchmarks");
}

}  // namespace

void add_catalog_routes(Studio::Impl& s) {
  add_accelerator_routes(s);
  add_model_routes(s);
  add_run_routes(s);
  add_benchmark_routes(s);
  Database& db = s.db;
  s.http.Get("/api/overview", [&db](const httplib::Request&, httplib::Response& res) {
    Json counts = Json::object();
    for (const char* t :
         {"accelerators", "models", "services", "conversations", "runs", "benchmarks"})
      counts[t] = db.row(std::string("SELECT count(*) AS n FROM ") + t, Json::array())["n"];
    counts["services_running"] =
        db.row("SELECT count(*) AS n FROM services WHERE state = 'running'", Json::array())["n"];
    reply(res, {{"counts", counts},
                {"schema_version", db.schema_version()},
                {"cores", std::thread::hardware_concurrency()}});
  });
}

}  // namespace tessera::studio

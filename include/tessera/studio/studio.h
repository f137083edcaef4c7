#pragma once
// `tessera studio`: one HTTP server (cpp-httplib) for the embedded web front end and its REST API
// under /api, over a SQLite database in data_dir (studio.db) that survives restarts:
//   /api/accelerators, /api/models, /api/services (+ /start /stop /restart /logs /metrics),
//   /api/conversations (+ /chat streaming, /stop, /export), /api/runs, /api/benchmarks
//   (+ /compare), /api/overview, /api/login.
// Served on a loopback address, it answers only requests for a loopback Host (403 otherwise:
// DNS rebinding). Reads are open; anything that changes state needs 'Authorization: Bearer
// <api_key>' (401 otherwise). Errors are JSON: {"error": {"message": "[studio.<what>] expected ...,
// got ...", "status": 400}}, 400 for bad input, 401, 404 for unknown ids, 409 for duplicates or
// conflicts. Services are `tessera serve` children (process.h): they keep running across a studio
// restart, which adopts them again; one that died while it should run is started again. A service's
// state is checked against its process ("exited" when it died) and, while it runs, its "health" is
// what its /health answers ("ok", "shutting_down", "unresponsive"). A model's card carries its KV
// cache bytes per token and context length; a conversation keeps the sampling settings its last
// message was sent with (temperature, top_p, max_tokens, seed, ignore_eos, system, and output:
// text, json_object, json_schema, regex or grammar, with output_spec the schema, expression or
// grammar; the service's structured output holds the reply to it).
#include <memory>
#include <string>

#include "tessera/studio/database.h"

namespace tessera::studio {

struct StudioConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port (bind returns it)
  std::string data_dir = "studio-data";  // studio.db and the services' logs
  std::string api_key;                   // must not be empty
  std::string tessera_bin;               // the `tessera` program services run
};

class Studio {
 public:
  // Opens (and migrates) the database and brings services back to their recorded state.
  explicit Studio(StudioConfig config);
  ~Studio();
  Studio(const Studio&) = delete;
  Studio& operator=(const Studio&) = delete;

  int bind();
  void run();   // until stop()
  void stop();  // from another thread; services keep running
  Database& db();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::studio

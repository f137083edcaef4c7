#pragma once
// The studio's SQLite database: one connection guarded by a mutex (the HTTP workers share it),
// rows returned as JSON objects, and a schema versioned with PRAGMA user_version and upgraded
// by numbered migrations (studio/migrations.cpp), each in its own transaction.
//
//   studio::Database db("studio.db");  // created and migrated to kSchemaVersion
//   db.query("SELECT * FROM models WHERE id = ?", {id});
//
// Columns named "<x>_json" hold JSON text and come back parsed under the key "<x>". SQLite
// errors throw RuntimeError "[studio.db] ..." with SQLite's message; a constraint violation
// (a duplicate unique name, say) throws ValueError so the API answers 409.
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace tessera::studio {

// The schema version this build writes; migrate() upgrades older files to it.
int schema_version_latest();

class Database {
 public:
  // Opens (creating) path, ":memory:" for a private in-memory database, and migrates it to
  // `target` (-1: the latest). RuntimeError when the file cannot be opened or is newer than
  // this build.
  explicit Database(const std::string& path, int target = -1);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one statement with `?` parameters bound from a JSON array (null, bool, numbers,
  // strings; objects and arrays are bound as their JSON text). Returns the rows.
  nlohmann::json query(const std::string& sql,
                       const nlohmann::json& params = nlohmann::json::array());
  // Runs an INSERT and returns the new row's id.
  int64_t insert(const std::string& sql, const nlohmann::json& params);
  // Runs an UPDATE/DELETE and returns how many rows it changed.
  int64_t change(const std::string& sql, const nlohmann::json& params);
  // The first row of query(), or null when there is none.
  nlohmann::json row(const std::string& sql, const nlohmann::json& params);

  int schema_version();
  // Applies the migrations after the current version up to target (-1: the latest).
  void migrate(int target = -1);

 private:
  void exec(const std::string& script);
  nlohmann::json run(const std::string& sql, const nlohmann::json& params, int64_t* changes,
                     int64_t* last_id);
  sqlite3* db_ = nullptr;
  std::recursive_mutex mutex_;
};

}  // namespace tessera::studio

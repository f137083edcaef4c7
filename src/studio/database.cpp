#include "tessera/studio/database.h"

#include <sqlite3.h>

#include <memory>

#include "tessera/core/error.h"

namespace tessera::studio {

// The numbered migrations, in order (migrations.cpp).
const std::vector<std::string>& migrations();

int schema_version_latest() { return static_cast<int>(migrations().size()); }

namespace {

using Json = nlohmann::json;

constexpr std::string_view kJsonSuffix = "_json";

[[noreturn]] void fail(sqlite3* db, const std::string& what) {
  const int code = sqlite3_errcode(db);
  const std::string msg =
      detail::str("[studio.db] expected ", what, " to succeed, got ", sqlite3_errmsg(db));
  if ((code & 0xff) == SQLITE_CONSTRAINT) throw ValueError(msg);
  throw RuntimeError(msg);
}

void bind(sqlite3* db, sqlite3_stmt* st, int i, const Json& v) {
  int rc = SQLITE_OK;
  if (v.is_null())
    rc = sqlite3_bind_null(st, i);
  else if (v.is_boolean())
    rc = sqlite3_bind_int64(st, i, v.get<bool>() ? 1 : 0);
  else if (v.is_number_integer())
    rc = sqlite3_bind_int64(st, i, v.get<int64_t>());
  else if (v.is_number())
    rc = sqlite3_bind_double(st, i, v.get<double>());
  else {
    const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
    rc = sqlite3_bind_text(st, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  if (rc != SQLITE_OK) fail(db, "binding parameter " + std::to_string(i));
}

Json column(sqlite3_stmt* st, int i, bool is_json) {
  switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
      return nullptr;
    case SQLITE_INTEGER:
      return static_cast<int64_t>(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
      return sqlite3_column_double(st, i);
    default: {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, i));
      std::string s(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(st, i)));
      if (!is_json) return s;
      return Json::parse(s, nullptr, /*allow_exceptions=*/false);
    }
  }
}

}  // namespace

Database::Database(const std::string& path, int target) {
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw RuntimeError("[studio.db] expected to open '" + path + "', got " + msg);
  }
  // WAL lets readers go on while a writer commits; a busy timeout instead of SQLITE_BUSY when
  // another studio process (a test, a restart) holds the file for a moment.
  sqlite3_busy_timeout(db_, 5000);
  try {
    exec("PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL;");
    migrate(target);
  } catch (...) {
    // A constructor that throws runs no destructor: close here (a newer schema, a failed
    // migration) or the connection leaks.
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Database::~Database() { sqlite3_close(db_); }

void Database::exec(const std::string& script) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (sqlite3_exec(db_, script.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
    fail(db_, "'" + script.substr(0, 60) + "'");
}

Json Database::run(const std::string& sql, const Json& params, int64_t* changes, int64_t* last_id) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK)
    fail(db_, "preparing '" + sql + "'");
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> st(raw, sqlite3_finalize);
  for (size_t i = 0; i < params.size(); ++i) bind(db_, raw, static_cast<int>(i + 1), params[i]);
  Json rows = Json::array();
  for (;;) {
    const int rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) fail(db_, "'" + sql + "'");
    Json row = Json::object();
    for (int c = 0; c < sqlite3_column_count(raw); ++c) {
      std::string name = sqlite3_column_name(raw, c);
      const bool is_json = name.size() > kJsonSuffix.size() && name.ends_with(kJsonSuffix);
      if (is_json) name.resize(name.size() - kJsonSuffix.size());
      row[name] = column(raw, c, is_json);
    }
    rows.push_back(std::move(row));
  }
  if (changes) *changes = sqlite3_changes(db_);
  if (last_id) *last_id = sqlite3_last_insert_rowid(db_);
  return rows;
}

Json Database::query(const std::string& sql, const Json& params) {
  return run(sql, params, nullptr, nullptr);
}

int64_t Database::insert(const std::string& sql, const Json& params) {
  int64_t id = 0;
  run(sql, params, nullptr, &id);
  return id;
}

int64_t Database::change(const std::string& sql, const Json& params) {
  int64_t n = 0;
  run(sql, params, &n, nullptr);
  return n;
}

Json Database::row(const std::string& sql, const Json& params) {
  Json rows = query(sql, params);
  return rows.empty() ? Json(nullptr) : rows[0];
}

int Database::schema_version() {
  return static_cast<int>(query("PRAGMA user_version")[0]["user_version"].get<int64_t>());
}

void Database::migrate(int target) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  const int latest = schema_version_latest();
  if (target < 0) target = latest;
  const int current = schema_version();
  if (current > latest)
    throw RuntimeError(detail::str("[studio.db] expected a schema version <= ", latest,
                                   " (this build), got ", current,
                                   " (written by a newer tessera studio)"));
  for (int v = current; v < target; ++v) {
    // Each migration and its version bump commit together, or not at all.
    exec("BEGIN");
    try {
      exec(migrations()[static_cast<size_t>(v)]);
      exec("PRAGMA user_version = " + std::to_string(v + 1));
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
}

}  // namespace tessera::studio

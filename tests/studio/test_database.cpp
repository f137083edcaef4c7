// The studio's SQLite layer: migrations from every older schema keep the data, a newer schema
// is refused, JSON columns round-trip, constraint violations are ValueErrors.
#include <gtest/gtest.h>

#include <filesystem>

#include "studio_harness.h"
#include "tessera/core/error.h"
#include "tessera/studio/database.h"

namespace tessera::studio {
namespace {

using testing::Json;

TEST(StudioDatabase, FreshDatabaseIsAtTheLatestSchema) {
  Database db(":memory:");
  EXPECT_EQ(db.schema_version(), schema_version_latest());
  EXPECT_GE(schema_version_latest(), 4);
}

TEST(StudioDatabase, MigrationFromVersionOneKeepsRowsAndAddsColumns) {
  const std::string path = testing::fresh_dir("migrate") + "/studio.db";
  {
    Database v1(path, 1);
    EXPECT_EQ(v1.schema_version(), 1);
    v1.insert("INSERT INTO conversations (title) VALUES (?)", {"kept"});
    v1.insert("INSERT INTO messages (conversation_id, role, content) VALUES (1, 'user', 'hi')",
              Json::array());
    v1.insert(
        "INSERT INTO models (name, path, format, arch, parameters, dtype, memory_bytes) VALUES "
        "('old', '/m.bin', 'llama2.c', 'llama', 10, 'float32', 40)",
        Json::array());
    EXPECT_THROW(v1.query("SELECT settings_json FROM conversations"), RuntimeError);
  }
  Database db(path);  // opening migrates
  EXPECT_EQ(db.schema_version(), schema_version_latest());
  const Json c = db.row("SELECT * FROM conversations WHERE id = 1", Json::array());
  EXPECT_EQ(c["title"], "kept");
  EXPECT_EQ(c["settings"], Json::object());  // the new column's default, parsed
  const Json m = db.row("SELECT * FROM messages WHERE id = 1", Json::array());
  EXPECT_EQ(m["content"], "hi");
  EXPECT_EQ(m["stats"], Json::object());
  const Json model = db.row("SELECT * FROM models WHERE id = 1", Json::array());
  EXPECT_EQ(model["memory_bytes"], 40);
  EXPECT_EQ(model["kv_bytes_per_token"], 0);  // unknown for a model registered before
  EXPECT_EQ(model["context_length"], 0);

  // Version 4 rebuilt conversations and messages: the foreign key still cascades, and a deleted
  // conversation's id is not handed out again.
  EXPECT_EQ(db.change("DELETE FROM conversations WHERE id = 1", Json::array()), 1);
  EXPECT_TRUE(db.row("SELECT * FROM messages", Json::array()).is_null());
  EXPECT_EQ(db.insert("INSERT INTO conversations (title) VALUES ('new')", Json::array()), 2);
}

// A plain INTEGER PRIMARY KEY gave a new conversation the newest deleted one's id, so a page or
// a late reply that still held it reached the new conversation.
TEST(StudioDatabase, DeletedConversationAndMessageIdsAreNotReused) {
  Database db(":memory:");
  db.insert("INSERT INTO conversations (title) VALUES ('a')", Json::array());
  const int64_t b = db.insert("INSERT INTO conversations (title) VALUES ('b')", Json::array());
  const int64_t m = db.insert(
      "INSERT INTO messages (conversation_id, role, content) VALUES (?, 'user', 'hi')", {b});
  db.change("DELETE FROM conversations WHERE id = ?", {b});
  EXPECT_GT(db.insert("INSERT INTO conversations (title) VALUES ('c')", Json::array()), b);
  EXPECT_GT(db.insert("INSERT INTO messages (conversation_id, role, content) VALUES (1, 'user', "
                      "'x')",
                      Json::array()),
            m);
}

TEST(StudioDatabase, NewerSchemaIsRefused) {
  const std::string path = testing::fresh_dir("newer") + "/studio.db";
  {
    Database db(path);
    db.query("PRAGMA user_version = 999");
  }
  try {
    Database db(path);
    FAIL() << "opened a schema from the future";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("expected a schema version <="), std::string::npos)
        << e.what();
  }
}

TEST(StudioDatabase, JsonColumnsRoundTripAndDuplicatesAreValueErrors) {
  Database db(":memory:");
  const Json compute = {{"fp32", 1e12}, {"bf16", 2e12}};
  const int64_t id =
      db.insert("INSERT INTO accelerators (brand, model, compute_json) VALUES (?, ?, ?)",
                {"NVIDIA", "H100", compute});
  EXPECT_EQ(db.row("SELECT * FROM accelerators WHERE id = ?", {id})["compute"], compute);
  db.insert("INSERT INTO runs (name, path) VALUES ('a', '/x')", Json::array());
  EXPECT_THROW(db.insert("INSERT INTO runs (name, path) VALUES ('b', '/x')", Json::array()),
               ValueError);
  EXPECT_EQ(db.change("DELETE FROM runs WHERE path = ?", {"/x"}), 1);
  EXPECT_TRUE(db.row("SELECT * FROM runs", Json::array()).is_null());
}

}  // namespace
}  // namespace tessera::studio

// The studio's schema, as numbered migrations: migration i takes user_version i to i + 1.
// Never edit a released migration; append a new one.
#include <string>
#include <vector>

namespace tessera::studio {

const std::vector<std::string>& migrations() {
  static const std::vector<std::string> m = {
      // 1: the first schema.
      R"sql(
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE accelerators (
  id INTEGER PRIMARY KEY, brand TEXT NOT NULL, model TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL DEFAULT 0, bandwidth_bytes_per_s REAL NOT NULL DEFAULT 0,
  compute_json TEXT NOT NULL DEFAULT '{}',  -- peak FLOP/s per dtype: {"fp32": 1e12}
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
CREATE TABLE models (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, path TEXT NOT NULL, format TEXT NOT NULL,
  arch TEXT NOT NULL, parameters INTEGER NOT NULL, dtype TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL, config_json TEXT NOT NULL DEFAULT '{}',
  tokenizer TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
CREATE TABLE services (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
  model_id INTEGER NOT NULL REFERENCES models(id) ON DELETE RESTRICT,
  port INTEGER NOT NULL, pid INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'stopped',    -- stopped | running | exited
  desired TEXT NOT NULL DEFAULT 'stopped',  -- what a studio restart brings back
  args_json TEXT NOT NULL DEFAULT '[]', started_at TEXT,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
CREATE TABLE conversations (
  id INTEGER PRIMARY KEY, title TEXT NOT NULL,
  service_id INTEGER REFERENCES services(id) ON DELETE SET NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
CREATE TABLE messages (
  id INTEGER PRIMARY KEY,
  conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
  role TEXT NOT NULL, content TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
CREATE TABLE runs (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL, path TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
CREATE TABLE benchmarks (
  id INTEGER PRIMARY KEY, suite TEXT NOT NULL, date TEXT NOT NULL, commit_sha TEXT NOT NULL,
  command TEXT NOT NULL, body_json TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));
)sql",
      // 2: per-message speed figures (TTFT, tokens/s), a conversation's sampling settings, a
      // benchmark tied to the accelerator it measured.
      R"sql(
ALTER TABLE messages ADD COLUMN stats_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE conversations ADD COLUMN settings_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE benchmarks ADD COLUMN accelerator_id INTEGER
  REFERENCES accelerators(id) ON DELETE SET NULL;
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
)sql",
      // 3: a model's KV cache bytes per token and context length, for its memory at full
      // context (0: registered before this migration).
      R"sql(
ALTER TABLE models ADD COLUMN kv_bytes_per_token INTEGER NOT NULL DEFAULT 0;
ALTER TABLE models ADD COLUMN context_length INTEGER NOT NULL DEFAULT 0;
)sql",
      // 4: conversation and message ids are never reused (AUTOINCREMENT): a plain INTEGER
      // PRIMARY KEY gave a new conversation the id of the newest deleted one, so a page or a
      // late reply still holding that id reached the new conversation. SQLite cannot add
      // AUTOINCREMENT in place: the tables are rebuilt, messages first dropped so that dropping
      // the old conversations cascades into nothing, and the renames carry the foreign key over.
      R"sql(
CREATE TABLE new_conversations (
  id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
  service_id INTEGER REFERENCES services(id) ON DELETE SET NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  settings_json TEXT NOT NULL DEFAULT '{}');
INSERT INTO new_conversations (id, title, service_id, created_at, settings_json)
  SELECT id, title, service_id, created_at, settings_json FROM conversations;
CREATE TABLE new_messages (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  conversation_id INTEGER NOT NULL REFERENCES new_conversations(id) ON DELETE CASCADE,
  role TEXT NOT NULL, content TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  stats_json TEXT NOT NULL DEFAULT '{}');
INSERT INTO new_messages (id, conversation_id, role, content, created_at, stats_json)
  SELECT id, conversation_id, role, content, created_at, stats_json FROM messages;
DROP TABLE messages;
DROP TABLE conversations;
ALTER TABLE new_conversations RENAME TO conversations;
ALTER TABLE new_messages RENAME TO messages;
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
)sql",
      // 5: a reasoning model's thinking (a service with --reasoning-parser), apart from its
      // answer; empty for others.
      R"sql(
ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT '';
)sql",
  };
  return m;
}

}  // namespace tessera::studio

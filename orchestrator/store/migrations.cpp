#include "orchestrator/store/migrations.h"

#include <sqlite3.h>

#include <chrono>
#include <iterator>
#include <string>
#include <thread>

#include "orchestrator/store/token_hash.h"

namespace precon::orch::store_schema {

namespace {

// Migration N takes the schema from version N-1 to N. Never edit one that has shipped:
// append a new one instead.
constexpr const char* kMigrations[] = {
    // 1: the tables.
    R"sql(
CREATE TABLE experiments (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  recipe_path TEXT NOT NULL DEFAULT '',
  recipe_text TEXT NOT NULL DEFAULT '',
  overrides_json TEXT NOT NULL DEFAULT '[]',
  state TEXT NOT NULL,
  objective_metric TEXT NOT NULL,
  objective_mode TEXT NOT NULL,
  max_concurrent INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  early_stop_json TEXT NOT NULL DEFAULT '{}',
  run_root TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL,
  ended_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX experiments_by_name ON experiments(name, id);
CREATE TABLE trials (
  id INTEGER PRIMARY KEY,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  params_json TEXT NOT NULL DEFAULT '{}',
  config_toml TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  run_dir TEXT NOT NULL DEFAULT '',
  token TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  last_step INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL,
  started_at REAL NOT NULL DEFAULT 0,
  ended_at REAL NOT NULL DEFAULT 0,
  UNIQUE (experiment_id, idx)
);
CREATE INDEX trials_by_state ON trials(state);
CREATE TABLE attempts (
  id INTEGER PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  number INTEGER NOT NULL,
  executor TEXT NOT NULL,
  external_id TEXT NOT NULL DEFAULT '',
  nodes TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  exit_code INTEGER NOT NULL DEFAULT -1,
  detail TEXT NOT NULL DEFAULT '',
  started_at REAL NOT NULL DEFAULT 0,
  ended_at REAL NOT NULL DEFAULT 0,
  UNIQUE (trial_id, number)
);
CREATE INDEX attempts_open ON attempts(id) WHERE ended_at = 0;
CREATE TABLE metrics (
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  time REAL NOT NULL,
  PRIMARY KEY (trial_id, name, step)
);
CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  objective REAL,
  created_at REAL NOT NULL,
  deleted_at REAL NOT NULL DEFAULT 0,
  UNIQUE (trial_id, step)
);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time REAL NOT NULL,
  experiment_id INTEGER NOT NULL DEFAULT 0,
  trial_id INTEGER NOT NULL DEFAULT 0,
  kind TEXT NOT NULL,
  message TEXT NOT NULL DEFAULT '',
  data_json TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_experiment ON events(experiment_id, id);
)sql",
    // 2: metric names interned and metric rows clustered by (trial, name, step) without a
    // rowid: rows shrink to a few integers and a trial's series is one contiguous range.
    R"sql(
CREATE TABLE metric_names (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
INSERT INTO metric_names(name) SELECT DISTINCT name FROM metrics ORDER BY name;
CREATE TABLE metrics_v2 (
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  name_id INTEGER NOT NULL REFERENCES metric_names(id),
  step INTEGER NOT NULL,
  value REAL,
  time REAL NOT NULL,
  PRIMARY KEY (trial_id, name_id, step)
) WITHOUT ROWID;
INSERT INTO metrics_v2(trial_id, name_id, step, value, time)
  SELECT m.trial_id, n.id, m.step, m.value, m.time FROM metrics m JOIN metric_names n ON n.name = m.name;
DROP TABLE metrics;
ALTER TABLE metrics_v2 RENAME TO metrics;
)sql",
    // 3: a trial is named by its id everywhere. Before, text and tables showed its sweep index;
    // the stored rows already refer to trials by id (events.trial_id, attempts, metrics), and no
    // stored message names a trial by its index. What carries the old names is the run
    // directories (trial-<index>), which stay where they are: workers, checkpoints and Slurm
    // scripts use those paths. One event per experiment says which trial each old number was,
    // for the notes and leaderboards people kept.
    R"sql(
INSERT INTO events (time, experiment_id, trial_id, kind, message, data_json)
SELECT (julianday('now') - 2440587.5) * 86400.0, experiment_id, 0, 'trial_names',
       'trials are named by their id from now on: ' ||
       CASE WHEN count(*) = 1
              THEN 'trial ' || min(id) || ' was numbered ' || min(idx) || ' before, and its run directory keeps that ' ||
                   'number (trial-' || min(idx) || ')'
            WHEN max(id - idx) = min(id - idx)
              THEN 'trials ' || min(id) || '..' || max(id) || ' were numbered ' || min(idx) || '..' || max(idx) ||
                   ' before, and their run directories keep those numbers (trial-' || min(idx) || '..trial-' ||
                   max(idx) || ')'
            ELSE 'this event''s data gives the old number of each trial; run directories keep the old numbers'
       END,
       json_object('trial_by_old_number', json_group_object(CAST(idx AS TEXT), id))
FROM (SELECT experiment_id, id, idx FROM trials ORDER BY experiment_id, idx) GROUP BY experiment_id ORDER BY experiment_id;
)sql",
    // 4: trial tokens are kept as their SHA-256 (token_hash.h), so the database file holds
    // nothing a report could be forged with. precon_token_hash is registered by open_and_migrate.
    R"sql(
ALTER TABLE trials RENAME COLUMN token TO token_hash;
UPDATE trials SET token_hash = precon_token_hash(token_hash) WHERE token_hash <> '';
)sql",
    // 5: an experiment's trials by state, and its started ones, straight from indexes: the
    // scheduler's pass, cancelling and the lists then read no trial row (a row's state sits after
    // its config text, which spills into overflow pages) however many trials it holds.
    R"sql(
CREATE INDEX trials_by_experiment_state ON trials(experiment_id, state);
CREATE INDEX trials_started ON trials(experiment_id, started_at) WHERE started_at > 0;
)sql",
};

constexpr int kVersion = static_cast<int>(std::size(kMigrations));

void sql_token_hash(sqlite3_context* context, int, sqlite3_value** argv) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_value_text(argv[0]));
  const int bytes = sqlite3_value_bytes(argv[0]);
  const std::string hash = hash_token(std::string_view(text ? text : "", text ? static_cast<size_t>(bytes) : 0));
  sqlite3_result_text(context, hash.data(), static_cast<int>(hash.size()), SQLITE_TRANSIENT);
}

// Switching a file to WAL takes an exclusive lock and answers SQLITE_BUSY at once, without the
// busy handler, while another process reads or migrates it; so it is retried here, for as long as
// any other statement would wait.
void use_wal(sql::Database& db) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(sql::kBusyTimeoutMs);
  for (;;) {
    const int rc = sqlite3_exec(db.handle(), "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc != SQLITE_BUSY || std::chrono::steady_clock::now() > give_up) {
      PRECON_SQLITE_CHECK(db.handle(), rc, db.path(), "PRAGMA journal_mode=WAL");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

StoreError newer_schema(const std::string& file, int version) {
  return StoreError(file + ": database schema version " + std::to_string(version) +
                    " is newer than this precon knows (" + std::to_string(kVersion) +
                    "); use the precon that wrote it, or a newer one");
}

}  // namespace

int current_version() { return kVersion; }

int open_and_migrate(sql::Database& db) {
  const std::string file = db.path().string();
  // Checked before anything is written (the journal mode lives in the file's header): a file
  // precon must not use is left exactly as it was. Another process (a second controller, or
  // `precon ls` while `precon run` starts) may be creating the same file right now: the checks
  // read one snapshot, and each step below re-reads the version under the write lock.
  int version = 0;
  int64_t app = 0;
  int64_t objects = 0;
  try {
    sql::Transaction snapshot(db, sql::Transaction::Read);
    version = static_cast<int>(db.int_pragma("user_version"));
    app = db.int_pragma("application_id");
    if (version == 0) {
      auto s = db.cached("SELECT count(*) FROM sqlite_schema");
      objects = s->step() ? s->i64(0) : 0;
    }
    snapshot.commit();
  } catch (const StoreError& e) {
    throw StoreError(file + ": not a precon database, or a corrupt one (" + e.what() + "); pass another path");
  }
  if (version > kVersion) throw newer_schema(file, version);
  if (app != 0 && app != kApplicationId)
    throw StoreError(file + ": not a precon database (SQLite application_id " + std::to_string(app) +
                     "); pass another path");
  if (version == 0) {
    if (objects > 0)
      throw StoreError(file + ": an SQLite database that precon did not create (it has tables but no "
                              "precon schema version); pass another path");
  } else {
    // Damaged pages would otherwise surface later, one query at a time, as errors in the middle
    // of a sweep.
    std::string problem;
    try {
      auto s = db.cached("PRAGMA quick_check(1)");
      problem = s->step() ? s->text(0) : "no answer";
    } catch (const StoreError& e) {
      problem = e.what();
    }
    if (problem != "ok")
      throw StoreError(file + ": the database is corrupt (SQLite quick_check: " + problem +
                       "); restore it from a backup, or start precon with another --db");
  }
  // WAL lets readers run beside the one writer; NORMAL syncs at checkpoints only, which is
  // durable against a controller crash (not against power loss of the last transactions).
  use_wal(db);
  db.exec("PRAGMA synchronous=NORMAL");
  db.exec("PRAGMA foreign_keys=ON");
  PRECON_SQLITE_CHECK(db.handle(),
                      sqlite3_create_function_v2(db.handle(), "precon_token_hash", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                                 nullptr, sql_token_hash, nullptr, nullptr, nullptr),
                      db.path(), "precon_token_hash");
  while (version < kVersion) {
    sql::Transaction tx(db);
    version = static_cast<int>(db.int_pragma("user_version"));  // another process may have moved it on
    if (version > kVersion) throw newer_schema(file, version);
    if (version == kVersion) break;
    db.exec(kMigrations[version]);
    db.exec("PRAGMA application_id=" + std::to_string(kApplicationId));
    db.exec("PRAGMA user_version=" + std::to_string(++version));
    tx.commit();
  }
  return version;
}

}  // namespace precon::orch::store_schema

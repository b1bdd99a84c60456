// Store migrations: databases written by earlier schema versions open and upgrade (trial ids
// kept, old numbers noted, tokens hashed), files are owner-only, newer and foreign files refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "orchestrator/store/migrations.h"
#include "orchestrator/store/store.h"
#include "orchestrator/store/token_hash.h"
#include "tests/orchestrator/support/store_fixture.h"

namespace precon::orch {
namespace {

namespace fs = std::filesystem;
using testing::full_experiment;
using testing::full_trial;
using testing::raw_sql;
using testing::StoreTest;

class StoreMigrations : public StoreTest {};

// Version 1 of the schema as it was shipped, frozen here.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',
  recipe_path TEXT NOT NULL DEFAULT '', recipe_text TEXT NOT NULL DEFAULT '', overrides_json TEXT NOT NULL DEFAULT '[]',
  state TEXT NOT NULL, objective_metric TEXT NOT NULL, objective_mode TEXT NOT NULL, max_concurrent INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL, early_stop_json TEXT NOT NULL DEFAULT '{}', run_root TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL, ended_at REAL NOT NULL DEFAULT 0);
CREATE INDEX experiments_by_name ON experiments(name, id);
CREATE TABLE trials (id INTEGER PRIMARY KEY, experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL, params_json TEXT NOT NULL DEFAULT '{}', config_toml TEXT NOT NULL DEFAULT '', state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '', run_dir TEXT NOT NULL DEFAULT '', token TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0, last_step INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,
  started_at REAL NOT NULL DEFAULT 0, ended_at REAL NOT NULL DEFAULT 0, UNIQUE (experiment_id, idx));
CREATE INDEX trials_by_state ON trials(state);
CREATE TABLE attempts (id INTEGER PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  number INTEGER NOT NULL, executor TEXT NOT NULL, external_id TEXT NOT NULL DEFAULT '', nodes TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL, exit_code INTEGER NOT NULL DEFAULT -1, detail TEXT NOT NULL DEFAULT '',
  started_at REAL NOT NULL DEFAULT 0, ended_at REAL NOT NULL DEFAULT 0, UNIQUE (trial_id, number));
CREATE INDEX attempts_open ON attempts(id) WHERE ended_at = 0;
CREATE TABLE metrics (trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE, name TEXT NOT NULL,
  step INTEGER NOT NULL, value REAL, time REAL NOT NULL, PRIMARY KEY (trial_id, name, step));
CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  step INTEGER NOT NULL, path TEXT NOT NULL, objective REAL, created_at REAL NOT NULL,
  deleted_at REAL NOT NULL DEFAULT 0, UNIQUE (trial_id, step));
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, experiment_id INTEGER NOT NULL DEFAULT 0,
  trial_id INTEGER NOT NULL DEFAULT 0, kind TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
  data_json TEXT NOT NULL DEFAULT '{}');
CREATE INDEX events_by_experiment ON events(experiment_id, id);
PRAGMA application_id = 1347568963;
PRAGMA user_version = 1;
)sql";

TEST_F(StoreMigrations, UpgradeVersion1) {
  raw_sql(path_, std::string(kSchemaV1) + R"sql(
INSERT INTO experiments (id, name, state, objective_metric, objective_mode, max_concurrent, max_attempts, created_at)
  VALUES (1, 'old', 'completed', 'val_loss', 'min', 1, 1, 5);
INSERT INTO trials (id, experiment_id, idx, state, created_at) VALUES (1, 1, 0, 'completed', 5);
INSERT INTO metrics VALUES (1, 'loss', 1, 3.0, 10), (1, 'loss', 2, NULL, 11), (1, 'acc', 1, 0.5, 10);
INSERT INTO events (time, kind) VALUES (1, 'trial_started');
)sql");
  {
    Store s(path_);
    EXPECT_EQ(s.schema_version(), 5);
    EXPECT_EQ(s.experiment(1)->state, ExperimentState::completed);
    EXPECT_EQ(s.metric_names(1), (std::vector<std::string>{"acc", "loss"}));
    auto loss = s.metrics(1, "loss");
    ASSERT_EQ(loss.size(), 2u);
    EXPECT_EQ(loss[0].value, 3.0);
    EXPECT_TRUE(std::isnan(loss[1].value));
    EXPECT_EQ(loss[1].time, 11);
    s.insert_metrics(1, {{"loss", 2, 1.0, 12}, {"new", 1, 1, 1}});
    EXPECT_EQ(s.metric_count(1), 4);
    EXPECT_EQ(s.events_since(0, 0).size(), 2u);  // with version 3's note on trial names
  }
  Store again(path_);  // already current: nothing to apply
  EXPECT_EQ(again.schema_version(), 5);
  EXPECT_EQ(again.metrics(1, "loss")[1].value, 1.0);
  EXPECT_EQ(again.events_since(0, 0).size(), 2u);
}

// What version 2 added to version 1, as it was shipped, frozen here.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE metric_names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE metrics_v2 (trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  name_id INTEGER NOT NULL REFERENCES metric_names(id), step INTEGER NOT NULL, value REAL, time REAL NOT NULL,
  PRIMARY KEY (trial_id, name_id, step)) WITHOUT ROWID;
DROP TABLE metrics;
ALTER TABLE metrics_v2 RENAME TO metrics;
PRAGMA user_version = 2;
)sql";

TEST_F(StoreMigrations, UpgradeVersion2KeepsTrialIdsAndNotesTheOldNumbers) {
  // Two experiments as version 2 stored them: trials numbered by sweep index (0..2 in each) with
  // run directories named after it; the second experiment's trials are ids 4..6.
  std::string sql = std::string(kSchemaV1) + kSchemaV2 + R"sql(
INSERT INTO experiments (id, name, state, objective_metric, objective_mode, max_concurrent, max_attempts, run_root,
  created_at) VALUES (1, 'a', 'completed', 'val_loss', 'min', 1, 1, '/runs/a', 5),
  (2, 'b', 'completed', 'val_loss', 'min', 1, 1, '/runs/b', 6);
INSERT INTO events (time, experiment_id, trial_id, kind, message) VALUES (6, 2, 5, 'trial_failed', 'exit code 1');
)sql";
  for (int id = 1; id <= 6; ++id) {
    const int exp = id <= 3 ? 1 : 2, idx = (id - 1) % 3;
    sql += "INSERT INTO trials (id, experiment_id, idx, state, run_dir, created_at) VALUES (" + std::to_string(id) +
           ", " + std::to_string(exp) + ", " + std::to_string(idx) + ", 'completed', '/runs/" +
           (exp == 1 ? "a" : "b") + "/trial-" + std::to_string(idx) + "', 5);\n";
  }
  raw_sql(path_, sql);
  Store s(path_);
  EXPECT_EQ(s.schema_version(), 5);
  // The identifiers: ids unchanged, the sweep index kept as an order, run directories where they are.
  std::vector<int64_t> ids;
  for (const TrialRow& t : s.trials(2)) {
    ids.push_back(t.id);
    EXPECT_EQ(t.run_dir, "/runs/b/trial-" + std::to_string(t.index));
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{4, 5, 6}));
  // Old events already name trials by id; each experiment gains one note mapping its old numbers.
  auto events = s.events_since(0, 10, 2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].trial_id, 5);
  EXPECT_EQ(events[0].message, "exit code 1");
  EXPECT_EQ(events[1].kind, "trial_names");
  EXPECT_EQ(events[1].trial_id, 0);
  EXPECT_EQ(events[1].message,
            "trials are named by their id from now on: trials 4..6 were numbered 0..2 before, and their run "
            "directories keep those numbers (trial-0..trial-2)");
  EXPECT_EQ(events[1].data_json, R"({"trial_by_old_number":{"0":4,"1":5,"2":6}})");
  EXPECT_GT(events[1].time, 1.6e9);
  auto first = s.events_since(0, 10, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_NE(first[0].message.find("trials 1..3 were numbered 0..2"), std::string::npos) << first[0].message;
}

// `n` processes open `path` as a Store at the same moment (released together from a pipe); each
// child's error, or "" when it opened. A controller and `precon ls`, or two controllers, can do
// this to one file.
std::vector<std::string> open_at_once(const fs::path& path, int n) {
  int go[2];
  EXPECT_EQ(::pipe(go), 0);
  std::vector<std::pair<pid_t, fs::path>> children;
  for (int i = 0; i < n; ++i) {
    const fs::path out = path.parent_path() / ("child" + std::to_string(i) + ".err");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      char c;
      if (::read(go[0], &c, 1) != 0) ::_exit(3);  // the parent closes its end: everyone starts
      try {
        Store s(path);
        ::_exit(s.schema_version() == store_schema::current_version() ? 0 : 2);
      } catch (const std::exception& e) {
        std::ofstream(out) << e.what();
        ::_exit(1);
      }
    }
    children.emplace_back(pid, out);
  }
  ::close(go[0]);
  ::close(go[1]);
  std::vector<std::string> errors;
  for (const auto& [pid, out] : children) {
    int raw = 0;
    ::waitpid(pid, &raw, 0);
    const int code = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    std::string what;
    if (code != 0) {
      std::ifstream in(out);
      what = "exit " + std::to_string(code) + ": " + std::string(std::istreambuf_iterator<char>(in), {});
    }
    errors.push_back(what);
  }
  return errors;
}

// The schema is created, or an old one upgraded, once: the checks read one snapshot and each step
// re-reads the version under the write lock. Before, a second process could find the tables of a
// version it had read as 0 ("table experiments already exists", or "an SQLite database that
// precon did not create"), and `precon run` died as it started.
TEST_F(StoreMigrations, ProcessesOpeningOneFileAtOnceEachOpenItAndEachStepRunsOnce) {
  for (int round = 0; round < 12; ++round) {
    const fs::path fresh = dir_ / ("fresh" + std::to_string(round) + ".db");
    for (const std::string& error : open_at_once(fresh, 6)) EXPECT_EQ(error, "") << "round " << round;
    Store s(fresh);
    EXPECT_TRUE(s.experiments().empty());
  }
  // A version-2 file upgraded by six processes at once: version 3 renumbers nothing and notes the
  // old numbers once.
  for (int round = 0; round < 6; ++round) {
    const fs::path old = dir_ / ("old" + std::to_string(round) + ".db");
    raw_sql(old, std::string(kSchemaV1) + kSchemaV2 + R"sql(
INSERT INTO experiments (id, name, state, objective_metric, objective_mode, max_concurrent, max_attempts, run_root,
  created_at) VALUES (1, 'a', 'completed', 'val_loss', 'min', 1, 1, '/runs/a', 5);
INSERT INTO trials (id, experiment_id, idx, state, run_dir, created_at) VALUES (1, 1, 0, 'completed', '/runs/a/trial-0', 5);
)sql");
    for (const std::string& error : open_at_once(old, 6)) EXPECT_EQ(error, "") << "round " << round;
    Store s(old);
    const auto events = s.events_since(0, 10, 1);
    ASSERT_EQ(events.size(), 1u) << "round " << round;
    EXPECT_EQ(events[0].kind, "trial_names");
  }
}

// Up to version 3 trial tokens were stored as they are; version 4 keeps their SHA-256 only.
TEST_F(StoreMigrations, UpgradeVersion3HashesTheStoredTokens) {
  raw_sql(path_, std::string(kSchemaV1) + kSchemaV2 + R"sql(
PRAGMA user_version = 3;
INSERT INTO experiments (id, name, state, objective_metric, objective_mode, max_concurrent, max_attempts, created_at)
  VALUES (1, 'a', 'running', 'val_loss', 'min', 1, 1, 5);
INSERT INTO trials (id, experiment_id, idx, state, token, created_at) VALUES
  (1, 1, 0, 'running', '0123456789abcdef0123456789abcdef', 5), (2, 1, 1, 'pending', '', 5);
)sql");
  {
    Store s(path_);
    EXPECT_EQ(s.schema_version(), 5);
    EXPECT_EQ(s.trial(1)->token_hash, hash_token("0123456789abcdef0123456789abcdef"));
    EXPECT_TRUE(token_matches("0123456789abcdef0123456789abcdef", s.trial(1)->token_hash));
    EXPECT_EQ(s.trial(2)->token_hash, "");  // never launched: nothing to hash
  }
  // The plain token is gone from the file (and from the WAL, checkpointed on close).
  std::ifstream in(path_, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.find("0123456789abcdef0123456789abcdef"), std::string::npos);
  EXPECT_NE(bytes.find(hash_token("0123456789abcdef0123456789abcdef")), std::string::npos);
}

// The database holds recipes, paths and token hashes: its files are the owner's only, whatever
// the umask, and files an older precon left readable are tightened.
TEST_F(StoreMigrations, DatabaseFilesAreOwnerOnly) {
  const mode_t old_umask = ::umask(022);
  const auto mode = [](const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
  };
  {
    Store s(path_);
    s.create_experiment(full_experiment("e"), {full_trial(0)});
    EXPECT_EQ(mode(path_), 0600);
    EXPECT_EQ(mode(path_.string() + "-wal"), 0600);
    EXPECT_EQ(mode(path_.string() + "-shm"), 0600);
  }
  ::chmod(path_.c_str(), 0644);
  {
    Store s(path_);
    s.create_experiment(full_experiment("f"), {full_trial(0)});
    EXPECT_EQ(mode(path_), 0600);
    EXPECT_EQ(mode(path_.string() + "-wal"), 0600);
  }
  ::umask(old_umask);
}

TEST_F(StoreMigrations, NewerVersionRejected) {
  { Store s(path_); }
  raw_sql(path_, "PRAGMA user_version = 99");
  try {
    Store s(path_);
    FAIL() << "opened a database from a newer precon";
  } catch (const StoreError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path_.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("99"), std::string::npos) << msg;
    EXPECT_NE(msg.find("newer"), std::string::npos) << msg;
  }
}

TEST_F(StoreMigrations, BadFilesRejected) {
  {
    std::ofstream f(path_);
    for (int i = 0; i < 200; ++i) f << "this is not a database, it is a log line " << i << "\n";
  }
  try {
    Store s(path_);
    FAIL() << "opened a text file";
  } catch (const StoreError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path_.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("not a"), std::string::npos) << msg;
  }
  const fs::path other = dir_ / "other.db";
  raw_sql(other, "CREATE TABLE t (x)");
  EXPECT_THROW(Store s(other), StoreError);
  EXPECT_THROW(Store s(dir_ / "missing_dir" / "x.db"), StoreError);
}

}  // namespace
}  // namespace precon::orch

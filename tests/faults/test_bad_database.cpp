// `precon serve` started on a database it must not use: a text file, another application's
// SQLite database, a precon database with corrupted pages, one cut short, and one written by a
// newer precon. Each time: a clear error naming the file at start, a nonzero exit, and the file
// left byte for byte as it was (never a silent reset or upgrade).
#include <sqlite3.h>

#include "orchestrator/store/migrations.h"
#include "orchestrator/store/store.h"
#include "tests/faults/fault_fixture.h"

namespace precon::orch::testing {
namespace {

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void raw_sql(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

class BadDatabase : public FaultFixture {
 protected:
  // A precon database of several pages: the schema and a few thousand events, checkpointed into
  // the main file (no -wal left).
  fs::path precon_db(const std::string& name) {
    const fs::path p = dir_ / name;
    { Store s(p); }
    std::string sql = "BEGIN;";
    for (int i = 0; i < 3000; ++i)
      sql += "INSERT INTO events(time, kind, message) VALUES (" + std::to_string(i) + ", 'note', 'event number " +
             std::to_string(i) + " with some text to fill the pages');";
    raw_sql(p, sql + "COMMIT; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;");
    return p;
  }
  // Runs `precon serve` on `db` and expects it to refuse at once with `want` in its error.
  void expect_refused(const fs::path& db, const std::vector<std::string>& want) {
    SCOPED_TRACE(db.filename().string());
    const std::string before = bytes_of(db);
    CommandResult r = run_command({PRECON_BIN, "serve", "--db", db.string(), "--runs", (dir_ / "runs").string(),
                                   "--port", "0", "--admin-token", "admin-secret", "--slurm", "off"},
                                  seconds(30));
    EXPECT_EQ(r.error.find("timed out"), std::string::npos) << "precon serve started on " << db << ":\n" << r.err;
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(db.string()), std::string::npos) << r.err;
    for (const std::string& w : want) EXPECT_NE(r.err.find(w), std::string::npos) << "want \"" << w << "\" in:\n" << r.err;
    EXPECT_TRUE(bytes_of(db) == before) << "the file was changed";
    ++refused_;
  }
  int refused_ = 0;
};

TEST_F(BadDatabase, EveryBadFileIsRefusedAtStartAndLeftAsItWas) {
  const fs::path text = dir_ / "text.db";
  {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "not a database, a log line " << i << "\n";
  }
  expect_refused(text, {"not a database"});

  const fs::path foreign = dir_ / "foreign.db";
  raw_sql(foreign, "CREATE TABLE songs (title TEXT); INSERT INTO songs VALUES ('a');");
  expect_refused(foreign, {"did not create"});

  const fs::path other_app = dir_ / "other-app.db";
  raw_sql(other_app, "PRAGMA application_id = 1234; CREATE TABLE t (x);");
  expect_refused(other_app, {"not a precon database"});

  const fs::path newer = precon_db("newer.db");
  raw_sql(newer, "PRAGMA user_version = " + std::to_string(store_schema::current_version() + 1));
  expect_refused(newer, {"newer than this precon", std::to_string(store_schema::current_version() + 1)});

  // Pages of the events table overwritten with garbage, the header left intact.
  const fs::path corrupt = precon_db("corrupt.db");
  {
    std::string b = bytes_of(corrupt);
    ASSERT_GT(b.size(), 40000u);
    for (size_t i = b.size() / 2; i < b.size() / 2 + 8192; ++i) b[i] = static_cast<char>((i * 131) & 0xff);
    std::ofstream(corrupt, std::ios::binary | std::ios::trunc) << b;
  }
  expect_refused(corrupt, {"corrupt"});

  const fs::path cut = precon_db("cut.db");
  {
    const std::string b = bytes_of(cut);
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << b.substr(0, b.size() / 2);
  }
  expect_refused(cut, {"corrupt"});
  table_row("bad precon.db (text, foreign, other app, newer, corrupt, cut)", refused_, 0, 0,
            refused_ == 6 && !HasFailure() ? "refused at start, file unchanged" : "FAILED");
}

}  // namespace
}  // namespace precon::orch::testing

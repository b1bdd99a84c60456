#include "orchestrator/store/sqlite.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "orchestrator/store/disk_space.h"

namespace precon::orch::sql {

void fail(sqlite3* db, int rc, const std::filesystem::path& file, std::string_view sql, const char* src,
          int line) {
  std::string msg = file.string() + ": SQLite error " + std::to_string(rc) + " (" +
                    (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)) + ")";
  if (rc == SQLITE_NOTADB)
    msg += "; the file is not a precon database (or it is damaged): move it aside or pass another path";
  if (!sql.empty()) msg += " in `" + std::string(sql) + "`";
  msg += " [" + std::filesystem::path(src).filename().string() + ":" + std::to_string(line) + "]";
  if ((rc & 0xff) == SQLITE_FULL)
    throw DiskFullError(file.string() + ": the disk holding the database is full; free space there (" + msg + ")");
  if ((rc & 0xff) == SQLITE_BUSY) {
    throw StoreBusyError(file.string() +
                         ": the database is locked by another connection (another process holds a write transaction "
                         "on it: `fuser` on the file finds it); writes resume once it ends (" + msg + ")");
  }
  throw StoreError(msg);
}

namespace {

// SQLite's busy handler for a connection under Database::wait_for_locks: 0 gives up (SQLITE_BUSY).
int wait_for_lock(void* arg, int tries) {
  auto& wait = *static_cast<LockWait*>(arg);
  const auto now = std::chrono::steady_clock::now();
  if (tries == 0) wait.busy_from = now;
  if (now - wait.busy_from >= LockWait::kBlockedAfter || now >= wait.give_up) {
    int64_t none = 0;
    wait.blocked_since.compare_exchange_strong(none,
                                               std::max<int64_t>(1, wait.busy_from.time_since_epoch().count()));
  }
  if (now >= wait.give_up) return 0;
  const auto pause = std::chrono::milliseconds(std::min(1 << std::min(tries, 5), 25));
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, wait.give_up - now));
  return 1;
}

}  // namespace

Statement::Statement(Database& db, std::string_view sql) : db_(db), sql_(sql) {
  PRECON_SQLITE_CHECK(db_.handle(),
                      sqlite3_prepare_v3(db_.handle(), sql_.data(), static_cast<int>(sql_.size()),
                                         SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr),
                      db_.path(), sql_);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int i, double v) {
  const int rc = std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v);
  PRECON_SQLITE_CHECK(db_.handle(), rc, db_.path(), sql_);
  return *this;
}

Statement& Statement::bind(int i, std::string_view v) {
  PRECON_SQLITE_CHECK(db_.handle(),
                      sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
                      db_.path(), sql_);
  return *this;
}

Statement& Statement::bind_int64(int i, int64_t v) {
  PRECON_SQLITE_CHECK(db_.handle(), sqlite3_bind_int64(stmt_, i, v), db_.path(), sql_);
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_.handle(), rc, db_.path(), sql_, __FILE__, __LINE__);
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);  // returns the last step's error, already reported by step()
  sqlite3_clear_bindings(stmt_);
}

int64_t Statement::i64(int col) const { return sqlite3_column_int64(stmt_, col); }

double Statement::f64(int col) const {
  if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, col);
}

std::string Statement::text(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col)) : std::string();
}

bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

Database::Database(const std::filesystem::path& path, bool read_only) : path_(path) {
  // The database holds recipes, paths and token hashes: owner only. SQLite gives the -wal and
  // -shm files the mode of the database file, so creating that one 0600 (before SQLite does,
  // with the umask's mode) covers all three; files from before are tightened.
  if (!read_only) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
    for (const char* suffix : {"", "-wal", "-shm"}) {
      const std::string file = path_.string() + suffix;
      struct stat st {};
      if (::stat(file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) ::chmod(file.c_str(), st.st_mode & 0700);
    }
  }
  const int flags = (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                    SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = path_.string() + ": cannot open the database (" +
                      (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc)) + ")";
    sqlite3_close(db_);
    db_ = nullptr;
    throw StoreError(msg + "; check that the directory exists and is writable");
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
}

Database::~Database() {
  cache_.clear();  // statements are finalised before the connection closes
  sqlite3_close(db_);
}

void Database::wait_for_locks(LockWait& wait) { sqlite3_busy_handler(db_, wait_for_lock, &wait); }

void Database::exec(std::string_view sql) {
  const std::string s(sql);
  PRECON_SQLITE_CHECK(db_, sqlite3_exec(db_, s.c_str(), nullptr, nullptr, nullptr), path_, s);
}

Use Database::cached(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it == cache_.end())
    it = cache_.emplace(std::string(sql), std::make_unique<Statement>(*this, sql)).first;
  return Use(*it->second);
}

int64_t Database::int_pragma(std::string_view name) {
  Statement s(*this, "PRAGMA " + std::string(name));
  return s.step() ? s.i64(0) : 0;
}

int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int64_t Database::changes() const { return sqlite3_changes64(db_); }

Transaction::Transaction(Database& db, Kind kind) : db_(db) { db_.exec(kind == Write ? "BEGIN IMMEDIATE" : "BEGIN"); }

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace precon::orch::sql

// A small RAII layer over the sqlite3 C API for the store: connections, prepared statements
// (cached per connection), transactions. Every failing call throws StoreError naming the
// database file, SQLite's message and the SQL. Thread-safety: none; a Database and its
// statements are used by one thread at a time (the store guards them).
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "orchestrator/store/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace precon::orch::sql {

// Throws StoreError: "<file>: SQLite error <code> (<errmsg>) in `<sql>` [<src>:<line>]";
// StoreBusyError for a lock another connection held, DiskFullError for a full disk.
[[noreturn]] void fail(sqlite3* db, int rc, const std::filesystem::path& file, std::string_view sql,
                       const char* src, int line);

#define PRECON_SQLITE_CHECK(db_, rc_expr_, file_, sql_text_)                                    \
  do {                                                                                          \
    const int precon_sqlite_rc_ = (rc_expr_);                                                   \
    if (precon_sqlite_rc_ != 0 /* SQLITE_OK */)                                                 \
      ::precon::orch::sql::fail((db_), precon_sqlite_rc_, (file_), (sql_text_), __FILE__, __LINE__); \
  } while (0)

// How long a statement waits for another connection's lock before failing with SQLITE_BUSY
// (StoreBusyError).
constexpr int kBusyTimeoutMs = 10000;

// How the store's writer waits for a lock another connection holds (Database::wait_for_locks):
// until give_up, which the thread holding the writer sets before each write, noting since when
// writes have found the database locked.
struct LockWait {
  std::chrono::steady_clock::time_point give_up;  // the writer's holder only
  std::chrono::steady_clock::time_point busy_from;  // the holder only: when the lock now waited on was met
  // Steady-clock ns since which the database has been found locked, set once one wait has lasted
  // kBlockedAfter (a lock of a few milliseconds, such as SQLite taking the WAL index for a moment,
  // is not "blocked"); 0 once a write went through.
  std::atomic<int64_t> blocked_since{0};
  static constexpr std::chrono::milliseconds kBlockedAfter{250};
};

class Database;

class Statement {
 public:
  Statement(Database& db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int i, double v);  // NaN is bound as NULL
  Statement& bind(int i, std::string_view v);
  Statement& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Statement& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  template <std::integral T>
  Statement& bind(int i, T v) { return bind_int64(i, static_cast<int64_t>(v)); }
  Statement& bind_int64(int i, int64_t v);
  // Binds the arguments to parameters 1, 2, ...
  template <class... A>
  Statement& bind_all(const A&... a) {
    int i = 0;
    (bind(++i, a), ...);
    return *this;
  }

  bool step();  // true while a row is available
  void run();   // steps a statement that returns no rows (or ignores them)
  void reset(); // ready to run again, bindings cleared

  int64_t i64(int col) const;
  double f64(int col) const;  // NULL reads as NaN
  std::string text(int col) const;
  bool is_null(int col) const;

 private:
  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// A cached statement in use: resets it (ending any implicit read transaction) when done.
class Use {
 public:
  explicit Use(Statement& s) : s_(s) {}
  ~Use() { s_.reset(); }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  Statement* operator->() { return &s_; }
  Statement& operator*() { return s_; }

 private:
  Statement& s_;
};

class Database {
 public:
  // Opens the file read-write (creating it) or read-only; busy_timeout is set either way.
  Database(const std::filesystem::path& path, bool read_only);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  sqlite3* handle() const { return db_; }
  // Waits for other connections' locks as `wait` says instead of the busy timeout. `wait` must
  // outlive the connection.
  void wait_for_locks(LockWait& wait);
  const std::filesystem::path& path() const { return path_; }

  void exec(std::string_view sql);  // one or more statements, results ignored
  // The statement for `sql`, prepared once per connection; use it through `Use`.
  Use cached(std::string_view sql);
  int64_t int_pragma(std::string_view name);  // e.g. "user_version"
  int64_t last_insert_rowid() const;
  int64_t changes() const;

 private:
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

// BEGIN IMMEDIATE on construction (the writer takes the lock up front so it never has to
// upgrade), ROLLBACK on destruction unless committed. Transaction::Read: a plain BEGIN, for reads
// that must see one snapshot of the file and take no write lock.
class Transaction {
 public:
  enum Kind { Write, Read };
  explicit Transaction(Database& db, Kind kind = Write);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& db_;
  bool done_ = false;
};

}  // namespace precon::orch::sql

// Store internals shared by store.cpp (rows) and store_metrics.cpp (metric series).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "orchestrator/store/series_cache.h"
#include "orchestrator/store/sqlite.h"
#include "orchestrator/store/store.h"

namespace precon::orch {

// One write at a time on the writer connection. (A condition variable rather than a mutex: a
// brief write stops waiting for its turn once the database is found locked.)
class WriterTurn {
 public:
  void take() {
    std::unique_lock lock(mu_);
    free_.wait(lock, [&] { return !taken_; });
    taken_ = true;
  }
  // Waits for the turn while `blocked` stays 0 (looking at it every 50 ms); false, the turn not
  // taken, once it is not.
  bool take_unless(const std::atomic<int64_t>& blocked) {
    std::unique_lock lock(mu_);
    while (taken_) {
      if (blocked.load() != 0) return false;
      free_.wait_for(lock, std::chrono::milliseconds(50));
    }
    taken_ = true;
    return true;
  }
  bool try_take() {
    std::lock_guard lock(mu_);
    if (taken_) return false;
    taken_ = true;
    return true;
  }
  void give_back() {
    {
      std::lock_guard lock(mu_);
      taken_ = false;
    }
    free_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable free_;
  bool taken_ = false;
};

// The state behind Store (a namespace-level type so that helpers in the .cpp files can name it).
struct StoreState {
  // 4M points ≈ 100 MB of steps, values and times: a few hundred long series.
  static constexpr size_t kDefaultCachePoints = size_t{4} << 20;
  static constexpr size_t kMaxIdleReaders = 16;

  // A read connection lent to one thread for one call, returned to the pool afterwards.
  class Reader {
   public:
    Reader(StoreState& impl, std::unique_ptr<sql::Database> db) : impl_(impl), db_(std::move(db)) {}
    ~Reader();
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    sql::Database& db() { return *db_; }

   private:
    StoreState& impl_;
    std::unique_ptr<sql::Database> db_;
  };

  explicit StoreState(const std::filesystem::path& p);

  Reader reader();
  // The id of a committed metric name, if any (reader side).
  std::optional<int64_t> metric_name_id(const std::string& name);

  std::filesystem::path path;
  int version = 0;

  WriterTurn turn;                       // guards writer, lock_wait.give_up, writer_names and writer_series
  std::function<void(const char* op, double seconds)> write_observer;  // set before concurrent use
  sql::LockWait lock_wait;               // before the writer, whose busy handler points at it
  std::unique_ptr<sql::Database> writer;
  std::unordered_map<std::string, int64_t> writer_names;  // includes the open transaction's
  std::set<std::pair<int64_t, int64_t>> writer_series;     // (trial, name id) known to have rows

  std::mutex pool_mu;
  std::vector<std::unique_ptr<sql::Database>> idle_readers;

  std::shared_mutex names_mu;  // committed metric names, for readers
  std::unordered_map<std::string, int64_t> names;

  SeriesCache cache{kDefaultCachePoints};
  std::atomic<uint64_t> metric_reads{0};  // Store::metric_reads()
};

// Holds the writer for one write, waiting for it (and for another connection's lock on the
// database) as `wait` says: StoreBusyError past that. Tells the write observer, if any, how long
// the write held the writer; a write that went through clears lock_wait.blocked_since.
class WriteGuard {
 public:
  WriteGuard(StoreState& state, const char* op, WriteWait wait = WriteWait::kPatient);
  ~WriteGuard();
  WriteGuard(const WriteGuard&) = delete;
  WriteGuard& operator=(const WriteGuard&) = delete;

 private:
  StoreState& state_;
  const char* op_;
  std::chrono::steady_clock::time_point start_;
  int exceptions_;  // std::uncaught_exceptions() at the start: more at the end means the write failed
};

struct Store::Impl : StoreState {
  using StoreState::StoreState;
};

}  // namespace precon::orch

// Store internals shared by store.cpp (rows) and store_metrics.cpp (metric series).
#pragma once

#include <atomic>
#include <chrono>
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

  std::mutex write_mu;                   // guards writer and writer_names
  std::function<void(const char* op, double seconds)> write_observer;  // set before concurrent use
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

// Holds the writer for one write (taken through write_mu) and tells the write observer, if any,
// how long the write held it.
class WriteGuard {
 public:
  WriteGuard(StoreState& state, const char* op)
      : state_(state), lock_(state.write_mu), op_(op), start_(std::chrono::steady_clock::now()) {}
  ~WriteGuard() {
    if (state_.write_observer)
      state_.write_observer(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  WriteGuard(const WriteGuard&) = delete;
  WriteGuard& operator=(const WriteGuard&) = delete;

 private:
  StoreState& state_;
  std::lock_guard<std::mutex> lock_;
  const char* op_;
  std::chrono::steady_clock::time_point start_;
};

struct Store::Impl : StoreState {
  using StoreState::StoreState;
};

}  // namespace precon::orch

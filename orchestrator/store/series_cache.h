// In-memory copies of metric series, so that a downsampled query of a million-point series is
// a scan of two vectors instead of a million-row SQL read. A series is loaded from SQLite on
// its first query and kept current by the writer after each commit (appends, and in-place
// replacement for resent steps). The least recently queried series are dropped when the
// cached points exceed a budget: a recency list and a running total make every read, update and
// eviction O(1) (amortised) under the cache's lock, however many series are cached.
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <utility>
#include <vector>

namespace precon::orch {

struct SeriesPoint {
  int64_t step = 0;
  double value = 0;
  double time = 0;
};

// One (trial, metric) series in step order, steps unique, with the index of the first minimum
// and maximum of every block of kBlock consecutive values, so that downsampling a million
// points reads a few thousand block summaries instead of every value.
struct Series {
  static constexpr size_t kBlock = 256;
  static constexpr uint32_t kNone = UINT32_MAX;  // a block of NaN only has no extremes

  std::vector<int64_t> steps;
  std::vector<double> values, times;
  std::vector<uint32_t> block_min, block_max;  // offsets within the block, or kNone

  // Upserts the points in order (a later point with the same step wins); keeps the blocks current.
  void merge(std::span<const SeriesPoint> points);
  // Recomputes the block summaries from the block holding point `from` to the end (after
  // steps/values were filled or changed directly).
  void reindex(size_t from = 0);
};

// Indices of the points kept when downsampling n points to at most max_points: buckets of
// consecutive points, each contributing its first, last, minimum and maximum (NaN values are
// ignored for the extremes; the first of equal extremes), in ascending order without duplicates.
// All indices when max_points is 0 or n <= max_points.
std::vector<size_t> downsample(std::span<const double> values, size_t max_points);
// The same selection, using the series' block summaries.
std::vector<size_t> downsample(const Series& series, size_t max_points);

class SeriesCache {
 public:
  using Key = std::pair<int64_t, int64_t>;  // (trial id, metric name id)

  struct Entry {
    std::shared_mutex mu;  // guards data; held exclusively while loading
    Series data;
    bool failed = false;                   // the load threw; readers retry
    // Guarded by SeriesCache::mu_:
    bool loading = true;
    std::vector<SeriesPoint> pending;      // commits seen while loading
    size_t size = 0;                       // points counted in SeriesCache::total_
    bool listed = false;                   // in the recency list (loaded and not evicted)
    std::list<Key>::iterator recency;      // its place there when listed
  };

  // A series held for reading (shared lock).
  struct Reading {
    std::shared_ptr<Entry> entry;
    std::shared_lock<std::shared_mutex> lock;
    const Series& series() const { return entry->data; }
  };

  // Empty series (queries of unknown names or trials) are cached too; this bounds their number.
  static constexpr size_t kMaxSeries = size_t{1} << 16;

  explicit SeriesCache(size_t budget_points) : budget_(budget_points) {}

  // The cached series for `key`, loading it with `load` (which fills a Series from the
  // database) on a miss. Concurrent readers of a loading series wait for it.
  Reading read(Key key, const std::function<void(Series&)>& load);

  // Called by the writer when it starts a series that had no rows: caches it empty (no load),
  // unless it is cached already. apply() then fills it.
  void seed(Key key);

  // Called by the writer after a commit: updates the series if it is cached or loading.
  // A load that starts after this call sees the commit in its snapshot; one in progress
  // gets the points replayed after it finishes.
  void apply(Key key, std::span<const SeriesPoint> points);

  void set_budget(size_t points);
  size_t cached_points() const;
  size_t cached_series() const;
  // Entries examined by evictions so far (tests: eviction is O(1) per series dropped).
  uint64_t eviction_steps() const;

 private:
  // Marks the entry most recently used (listing it when it is not).
  void touch_locked(const std::shared_ptr<Entry>& e, Key key);
  // Drops least recently used series until the budget holds (never `keep`, never one loading).
  void evict_locked(const Entry* keep);

  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<Entry>> map_;
  std::list<Key> recency_;  // loaded series, most recently used first
  size_t budget_;
  size_t total_ = 0;        // points of the listed series
  uint64_t eviction_steps_ = 0;
};

}  // namespace precon::orch

#include "orchestrator/store/series_cache.h"

#include <algorithm>
#include <cmath>

namespace precon::orch {

void Series::merge(std::span<const SeriesPoint> points) {
  size_t first_changed = steps.size();
  for (const SeriesPoint& p : points) {
    if (steps.empty() || p.step > steps.back()) {
      first_changed = std::min(first_changed, steps.size());
      steps.push_back(p.step);
      values.push_back(p.value);
      times.push_back(p.time);
      continue;
    }
    const auto it = std::lower_bound(steps.begin(), steps.end(), p.step);
    const auto i = static_cast<size_t>(it - steps.begin());
    first_changed = std::min(first_changed, i);
    if (*it == p.step) {
      values[i] = p.value;
      times[i] = p.time;
    } else {
      steps.insert(it, p.step);
      values.insert(values.begin() + i, p.value);
      times.insert(times.begin() + i, p.time);
    }
  }
  if (first_changed < steps.size()) reindex(first_changed);
}

void Series::reindex(size_t from) {
  const size_t n = values.size();
  const size_t blocks = (n + kBlock - 1) / kBlock;
  const size_t first = std::min(from / kBlock, block_min.size());
  block_min.resize(blocks);
  block_max.resize(blocks);
  for (size_t b = first; b < blocks; ++b) {
    const size_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    uint32_t imin = kNone, imax = kNone;
    double mn = 0, mx = 0;
    for (size_t i = lo; i < hi; ++i) {
      const double x = values[i];
      if (std::isnan(x)) continue;
      if (imin == kNone || x < mn) mn = x, imin = static_cast<uint32_t>(i - lo);
      if (imax == kNone || x > mx) mx = x, imax = static_cast<uint32_t>(i - lo);
    }
    block_min[b] = imin;
    block_max[b] = imax;
  }
}

namespace {

// First minimum and maximum of values[lo, hi) ignoring NaN; hi when there is none.
struct Extremes {
  size_t imin, imax;
};

// Scans values[lo, hi), updating the running extremes (strict comparisons keep the first).
void scan(std::span<const double> v, size_t lo, size_t hi, size_t end, Extremes& e) {
  for (size_t i = lo; i < hi; ++i) {
    const double x = v[i];
    if (std::isnan(x)) continue;
    if (e.imin == end || x < v[e.imin]) e.imin = i;
    if (e.imax == end || x > v[e.imax]) e.imax = i;
  }
}

Extremes extremes_by_scan(std::span<const double> v, size_t lo, size_t hi) {
  Extremes e{hi, hi};
  scan(v, lo, hi, hi, e);
  return e;
}

// The same, reading whole blocks from their summaries.
Extremes extremes_by_blocks(const Series& s, size_t lo, size_t hi) {
  constexpr size_t B = Series::kBlock;
  std::span<const double> v = s.values;
  Extremes e{hi, hi};
  const size_t first_full = (lo + B - 1) / B, last_full = hi / B;  // blocks [first_full, last_full)
  if (first_full >= last_full) {
    scan(v, lo, hi, hi, e);
    return e;
  }
  scan(v, lo, first_full * B, hi, e);
  for (size_t b = first_full; b < last_full; ++b) {
    if (s.block_min[b] == Series::kNone) continue;
    const size_t imin = b * B + s.block_min[b], imax = b * B + s.block_max[b];
    if (e.imin == hi || v[imin] < v[e.imin]) e.imin = imin;
    if (e.imax == hi || v[imax] > v[e.imax]) e.imax = imax;
  }
  scan(v, last_full * B, hi, hi, e);
  return e;
}

// Appends, in ascending order and without duplicates, the bucket [lo, hi)'s first, last,
// minimum and maximum.
void keep_bucket(size_t lo, size_t hi, Extremes e, std::vector<size_t>& out) {
  size_t picks[4] = {lo, hi - 1, e.imin, e.imax};
  std::sort(picks, picks + 4);
  for (size_t p : picks)
    if (p < hi && (out.empty() || out.back() != p)) out.push_back(p);
}

template <class ExtremesFn>
std::vector<size_t> downsample_with(size_t n, size_t max_points, ExtremesFn extremes) {
  std::vector<size_t> out;
  if (max_points == 0 || n <= max_points) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  if (max_points < 4) {
    // Too few for one full bucket: the extremes first, then the last and first points.
    const Extremes e = extremes(0, n);
    for (size_t p : {e.imin, e.imax, n - 1, size_t{0}})
      if (p < n && out.size() < max_points && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    std::sort(out.begin(), out.end());
    return out;
  }
  const size_t buckets = max_points / 4;
  out.reserve(buckets * 4);
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
    keep_bucket(lo, hi, extremes(lo, hi), out);
  }
  return out;
}

}  // namespace

std::vector<size_t> downsample(std::span<const double> values, size_t max_points) {
  return downsample_with(values.size(), max_points,
                         [&](size_t lo, size_t hi) { return extremes_by_scan(values, lo, hi); });
}

std::vector<size_t> downsample(const Series& series, size_t max_points) {
  const size_t n = series.values.size();
  if (series.block_min.size() != (n + Series::kBlock - 1) / Series::kBlock) return downsample(series.values, max_points);
  return downsample_with(n, max_points, [&](size_t lo, size_t hi) { return extremes_by_blocks(series, lo, hi); });
}

SeriesCache::Reading SeriesCache::read(Key key, const std::function<void(Series&)>& load) {
  for (;;) {
    std::shared_ptr<Entry> e;
    std::unique_lock<std::shared_mutex> loading;
    {
      std::lock_guard g(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        e = it->second;
        if (e->listed) touch_locked(e, key);
      }
    }
    if (!e) {
      // Locked before it is published (and outside mu_: the lock order is entry, then mu_).
      auto fresh = std::make_shared<Entry>();
      loading = std::unique_lock(fresh->mu);
      std::lock_guard g(mu_);
      auto [it, inserted] = map_.emplace(key, fresh);
      if (!inserted) loading.unlock();  // another reader got there first
      e = it->second;
      if (e->listed) touch_locked(e, key);
    }
    if (loading.owns_lock()) {
      try {
        load(e->data);
        e->data.reindex(0);
      } catch (...) {
        std::lock_guard g(mu_);
        auto it = map_.find(key);
        if (it != map_.end() && it->second == e) map_.erase(it);
        e->failed = true;
        throw;
      }
      std::lock_guard g(mu_);
      e->data.merge(e->pending);
      e->pending = {};
      e->loading = false;
      e->size = e->data.steps.size();
      total_ += e->size;
      touch_locked(e, key);
      evict_locked(e.get());
    }
    if (loading.owns_lock()) loading.unlock();
    std::shared_lock lock(e->mu);
    if (e->failed) continue;
    return Reading{std::move(e), std::move(lock)};
  }
}

void SeriesCache::seed(Key key) {
  std::lock_guard g(mu_);
  auto [it, inserted] = map_.try_emplace(key);
  if (!inserted) return;
  it->second = std::make_shared<Entry>();
  it->second->loading = false;
  touch_locked(it->second, key);
  evict_locked(it->second.get());
}

void SeriesCache::apply(Key key, std::span<const SeriesPoint> points) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard g(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return;
    e = it->second;
    if (e->loading) {
      e->pending.insert(e->pending.end(), points.begin(), points.end());
      return;
    }
  }
  std::unique_lock w(e->mu);
  e->data.merge(points);
  const size_t now = e->data.steps.size();
  std::lock_guard g(mu_);
  // Counted only while it is still cached: an eviction in between took its old size off.
  if (!e->listed) return;
  total_ += now - e->size;
  e->size = now;
  evict_locked(nullptr);
}

void SeriesCache::set_budget(size_t points) {
  std::lock_guard g(mu_);
  budget_ = points;
  evict_locked(nullptr);
}

size_t SeriesCache::cached_points() const {
  std::lock_guard g(mu_);
  return total_;
}

size_t SeriesCache::cached_series() const {
  std::lock_guard g(mu_);
  return map_.size();
}

uint64_t SeriesCache::eviction_steps() const {
  std::lock_guard g(mu_);
  return eviction_steps_;
}

void SeriesCache::touch_locked(const std::shared_ptr<Entry>& e, Key key) {
  if (e->listed) {
    recency_.splice(recency_.begin(), recency_, e->recency);
    return;
  }
  recency_.push_front(key);
  e->recency = recency_.begin();
  e->listed = true;
}

void SeriesCache::evict_locked(const Entry* keep) {
  // Series still loading are not listed: they are neither counted nor dropped until loaded.
  while ((total_ > budget_ || map_.size() > kMaxSeries) && !recency_.empty()) {
    ++eviction_steps_;
    auto it = map_.find(recency_.back());
    if (it->second.get() == keep) break;  // the least recently used is the one just touched: nothing older
    total_ -= it->second->size;
    it->second->listed = false;
    recency_.pop_back();
    map_.erase(it);
  }
}

}  // namespace precon::orch

#include "orchestrator/store/series_cache.h"

#include <algorithm>
#include <cmath>

namespace precon::orch {

void Series::merge(std::span<const SeriesPoint> points) {
  for (const SeriesPoint& p : points) {
    if (steps.empty() || p.step > steps.back()) {
      steps.push_back(p.step);
      values.push_back(p.value);
      times.push_back(p.time);
      continue;
    }
    const auto it = std::lower_bound(steps.begin(), steps.end(), p.step);
    const auto i = it - steps.begin();
    if (*it == p.step) {
      values[i] = p.value;
      times[i] = p.time;
    } else {
      steps.insert(it, p.step);
      values.insert(values.begin() + i, p.value);
      times.insert(times.begin() + i, p.time);
    }
  }
}

namespace {

// Appends, in ascending order and without duplicates, the bucket [lo, hi)'s first, last,
// minimum and maximum.
void keep_bucket(std::span<const double> v, size_t lo, size_t hi, std::vector<size_t>& out) {
  size_t j = lo;
  while (j < hi && std::isnan(v[j])) ++j;
  size_t imin = j, imax = j;  // hi: the bucket is all NaN
  if (j < hi) {
    // NaN compares false both ways, so it never becomes an extreme; no test in the hot loop.
    double mn = v[j], mx = v[j];
    for (size_t i = j + 1; i < hi; ++i) {
      const double x = v[i];
      if (x < mn) mn = x, imin = i;
      if (x > mx) mx = x, imax = i;
    }
  }
  size_t picks[4] = {lo, hi - 1, imin, imax};
  std::sort(picks, picks + 4);
  for (size_t p : picks)
    if (p < hi && (out.empty() || out.back() != p)) out.push_back(p);
}

}  // namespace

std::vector<size_t> downsample(std::span<const double> values, size_t max_points) {
  const size_t n = values.size();
  std::vector<size_t> out;
  if (max_points == 0 || n <= max_points) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  if (max_points < 4) {
    // Too few for one full bucket: the extremes first, then the last and first points.
    size_t imin = n, imax = n;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(values[i])) continue;
      if (imin == n || values[i] < values[imin]) imin = i;
      if (imax == n || values[i] > values[imax]) imax = i;
    }
    for (size_t p : {imin, imax, n - 1, size_t{0}})
      if (p < n && out.size() < max_points && std::find(out.begin(), out.end(), p) == out.end())
        out.push_back(p);
    std::sort(out.begin(), out.end());
    return out;
  }
  const size_t buckets = max_points / 4;
  out.reserve(buckets * 4);
  for (size_t b = 0; b < buckets; ++b) keep_bucket(values, b * n / buckets, (b + 1) * n / buckets, out);
  return out;
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
        e->last_used = ++tick_;
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
      e->last_used = ++tick_;
    }
    if (loading.owns_lock()) {
      try {
        load(e->data);
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
      evict_locked(e.get());
    }
    if (loading.owns_lock()) loading.unlock();
    std::shared_lock lock(e->mu);
    if (e->failed) continue;
    return Reading{std::move(e), std::move(lock)};
  }
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
  {
    std::unique_lock w(e->mu);
    const size_t before = e->data.steps.size();
    e->data.merge(points);
    e->size = e->data.steps.size();
    grown_ += e->data.steps.size() - before;
  }
  if (grown_ > budget_ / 16) {
    std::lock_guard g(mu_);
    grown_ = 0;
    evict_locked(nullptr);
  }
}

void SeriesCache::set_budget(size_t points) {
  std::lock_guard g(mu_);
  budget_ = points;
  evict_locked(nullptr);
}

size_t SeriesCache::cached_points() const {
  std::lock_guard g(mu_);
  size_t total = 0;
  for (const auto& [key, e] : map_) total += e->size;
  return total;
}

void SeriesCache::evict_locked(const Entry* keep) {
  size_t total = 0;
  for (const auto& [key, e] : map_) total += e->size;
  if (total <= budget_ && map_.size() <= kMaxSeries) return;
  std::vector<std::pair<uint64_t, Key>> order;
  for (const auto& [key, e] : map_)
    if (!e->loading && e.get() != keep) order.emplace_back(e->last_used.load(), key);
  std::sort(order.begin(), order.end());
  for (const auto& [used, key] : order) {
    if (total <= budget_ && map_.size() <= kMaxSeries) break;
    auto it = map_.find(key);
    total -= it->second->size;
    map_.erase(it);
  }
}

}  // namespace precon::orch

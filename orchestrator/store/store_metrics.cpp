// Metric series: ingest (one transaction per batch, idempotent upserts) and queries, with
// downsampled reads served from the in-memory series cache (series_cache.h).
#include <algorithm>
#include <limits>
#include <map>

#include "orchestrator/store/store_impl.h"

namespace precon::orch {

std::optional<int64_t> StoreState::metric_name_id(const std::string& name) {
  {
    std::shared_lock g(names_mu);
    auto it = names.find(name);
    if (it != names.end()) return it->second;
  }
  // Not seen by this process yet; the table is the truth (the name may be committed already).
  auto r = reader();
  auto s = r.db().cached("SELECT id FROM metric_names WHERE name = ?");
  s->bind(1, name);
  if (!s->step()) return std::nullopt;
  return s->i64(0);
}

size_t Store::insert_metrics(int64_t trial_id, const std::vector<MetricPoint>& points, WriteWait wait) {
  if (points.empty()) return 0;
  int64_t max_step = points.front().step;
  for (const MetricPoint& p : points) {
    if (p.name.empty()) throw StoreError("insert_metrics: a metric name is empty (trial " + std::to_string(trial_id) + ")");
    max_step = std::max(max_step, p.step);
  }
  // Points per name id, in input order, for the cache once the transaction has committed.
  std::map<int64_t, std::vector<SeriesPoint>> by_series;
  std::vector<std::pair<std::string, int64_t>> new_names;
  std::vector<int64_t> fresh;  // name ids of series that had no rows before this write
  {
    WriteGuard g(*impl_, "insert_metrics", wait);
    auto& db = *impl_->writer;
    try {
      sql::Transaction tx(db);
      db.cached("UPDATE trials SET last_step = max(last_step, ?) WHERE id = ?")->bind_all(max_step, trial_id).run();
      if (db.changes() == 0) throw StoreError("insert_metrics: no trial with id " + std::to_string(trial_id));
      auto ins = db.cached(
          "INSERT INTO metrics (trial_id, name_id, step, value, time) VALUES (?, ?, ?, ?, ?) "
          "ON CONFLICT (trial_id, name_id, step) DO UPDATE SET value = excluded.value, time = excluded.time");
      const std::string* last_name = nullptr;
      int64_t name_id = 0;
      for (const MetricPoint& p : points) {
        if (!last_name || *last_name != p.name) {
          auto it = impl_->writer_names.find(p.name);
          if (it == impl_->writer_names.end()) {
            db.cached("INSERT INTO metric_names (name) VALUES (?)")->bind(1, p.name).run();
            it = impl_->writer_names.emplace(p.name, db.last_insert_rowid()).first;
            new_names.emplace_back(p.name, it->second);
          }
          name_id = it->second;
          last_name = &p.name;
          if (impl_->writer_series.insert({trial_id, name_id}).second) {
            auto any = db.cached("SELECT 1 FROM metrics WHERE trial_id = ? AND name_id = ? LIMIT 1");
            any->bind_all(trial_id, name_id);
            if (!any->step()) fresh.push_back(name_id);
            any->reset();
          }
        }
        ins->bind_all(trial_id, name_id, p.step, p.value, p.time).run();
        ins->reset();
        by_series[name_id].push_back({p.step, p.value, p.time});
      }
      tx.commit();
    } catch (...) {
      for (const auto& [name, id] : new_names) impl_->writer_names.erase(name);
      for (int64_t id : fresh) impl_->writer_series.erase({trial_id, id});
      throw;
    }
    // Still under the write lock, so the cache sees commits in commit order.
    if (!new_names.empty()) {
      std::unique_lock n(impl_->names_mu);
      for (const auto& [name, id] : new_names) impl_->names.emplace(name, id);
    }
    // A series this write started is complete in the cache from its first point, so queries of
    // running trials never pay for a load from SQLite.
    for (int64_t id : fresh) impl_->cache.seed({trial_id, id});
    for (const auto& [name_id, pts] : by_series) impl_->cache.apply({trial_id, name_id}, pts);
  }
  return points.size();
}

std::vector<std::string> Store::metric_names(int64_t trial_id) const {
  auto r = impl_->reader();
  // Skips from one name id to the next through the primary key instead of scanning the rows.
  auto s = r.db().cached(
      "WITH RECURSIVE ids(id) AS ("
      "  SELECT min(name_id) FROM metrics WHERE trial_id = ?1"
      "  UNION ALL"
      "  SELECT (SELECT min(name_id) FROM metrics WHERE trial_id = ?1 AND name_id > ids.id) FROM ids"
      "  WHERE ids.id IS NOT NULL) "
      "SELECT n.name FROM ids JOIN metric_names n ON n.id = ids.id ORDER BY n.name");
  s->bind(1, trial_id);
  std::vector<std::string> names;
  while (s->step()) names.push_back(s->text(0));
  return names;
}

std::vector<MetricPoint> Store::metrics(int64_t trial_id, const std::string& name, size_t max_points) const {
  ++impl_->metric_reads;
  const auto name_id = impl_->metric_name_id(name);
  if (!name_id) return {};
  auto load = [&](Series& series) {
    auto r = impl_->reader();
    auto s = r.db().cached("SELECT step, value, time FROM metrics WHERE trial_id = ? AND name_id = ? ORDER BY step");
    s->bind_all(trial_id, *name_id);
    while (s->step()) {
      series.steps.push_back(s->i64(0));
      series.values.push_back(s->f64(1));
      series.times.push_back(s->f64(2));
    }
  };
  const auto reading = impl_->cache.read({trial_id, *name_id}, load);
  const Series& series = reading.series();
  const std::vector<size_t> keep = downsample(series, max_points);
  std::vector<MetricPoint> out(keep.size());
  for (size_t k = 0; k < keep.size(); ++k) {
    const size_t i = keep[k];
    out[k].name = name;
    out[k].step = series.steps[i];
    out[k].value = series.values[i];
    out[k].time = series.times[i];
  }
  return out;
}

void Store::warm_series(int64_t trial_id, const std::atomic<bool>* cancel) const {
  for (const std::string& name : metric_names(trial_id)) {
    if (cancel && cancel->load()) return;
    metrics(trial_id, name, 1);
  }
}

namespace {

std::optional<MetricPoint> one_point(StoreState& impl, const std::string& sql, const std::string& name,
                                     int64_t trial_id, int64_t name_id, int64_t step) {
  auto r = impl.reader();
  auto s = r.db().cached(sql);
  s->bind_all(trial_id, name_id, step);
  if (!s->step()) return std::nullopt;
  return MetricPoint{name, s->i64(0), s->f64(1), s->f64(2)};
}

}  // namespace

std::optional<MetricPoint> Store::metric_at_or_before(int64_t trial_id, const std::string& name,
                                                      int64_t step) const {
  ++impl_->metric_reads;
  const auto name_id = impl_->metric_name_id(name);
  if (!name_id) return std::nullopt;
  return one_point(*impl_,
                   "SELECT step, value, time FROM metrics WHERE trial_id = ? AND name_id = ? AND step <= ? "
                   "ORDER BY step DESC LIMIT 1",
                   name, trial_id, *name_id, step);
}

std::optional<MetricPoint> Store::last_metric(int64_t trial_id, const std::string& name) const {
  return metric_at_or_before(trial_id, name, INT64_MAX);
}

std::optional<TrialMetricPoint> Store::best_metric(int64_t experiment_id, const std::string& name, bool highest) const {
  ++impl_->metric_reads;
  const auto name_id = impl_->metric_name_id(name);
  if (!name_id) return std::nullopt;
  // The experiment's trials from their index, each trial's series of the metric a range of the
  // metrics table's key; NaN is stored as NULL, and the bounds leave out the infinities too.
  auto r = impl_->reader();
  auto s = r.db().cached(highest ? "SELECT m.trial_id, m.step, m.value, m.time FROM trials t JOIN metrics m "
                                   "ON m.trial_id = t.id AND m.name_id = ?2 WHERE t.experiment_id = ?1 "
                                   "AND m.value BETWEEN ?3 AND ?4 ORDER BY m.value DESC, m.trial_id, m.step LIMIT 1"
                                 : "SELECT m.trial_id, m.step, m.value, m.time FROM trials t JOIN metrics m "
                                   "ON m.trial_id = t.id AND m.name_id = ?2 WHERE t.experiment_id = ?1 "
                                   "AND m.value BETWEEN ?3 AND ?4 ORDER BY m.value, m.trial_id, m.step LIMIT 1");
  s->bind_all(experiment_id, *name_id, std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max());
  if (!s->step()) return std::nullopt;
  return TrialMetricPoint{s->i64(0), {name, s->i64(1), s->f64(2), s->f64(3)}};
}

uint64_t Store::metric_reads() const { return impl_->metric_reads.load(); }

int64_t Store::metric_count(int64_t trial_id) const {
  auto r = impl_->reader();
  auto s = r.db().cached("SELECT count(*) FROM metrics WHERE trial_id = ?");
  s->bind(1, trial_id);
  return s->step() ? s->i64(0) : 0;
}

void Store::set_metric_cache_limit(size_t points) { impl_->cache.set_budget(points); }
size_t Store::metric_cache_points() const { return impl_->cache.cached_points(); }

}  // namespace precon::orch

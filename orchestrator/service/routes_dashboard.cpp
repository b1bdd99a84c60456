// The dashboard's routes (routes.cpp lists them): views shaped for web/, handlers over the store.
#include "orchestrator/service/routes_dashboard.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "orchestrator/common/clock.h"
#include "orchestrator/service/api.h"
#include "orchestrator/service/queries.h"
#include "orchestrator/service/views.h"
#include "orchestrator/store/store_pages.h"

namespace precon::orch {

using nlohmann::json;

namespace {

constexpr const char* kDefaultCurve = "train_loss";

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// The best objective point of a trial (min or max by the experiment's mode). Downsampling keeps
// every bucket's extremes, so a downsampled read still holds the exact best value.
std::optional<MetricPoint> best_point(const Store& store, int64_t trial_id, const ExperimentRow& e) {
  std::optional<MetricPoint> best;
  const bool max = maximizes(e.objective_mode);
  for (const MetricPoint& p : store.metrics(trial_id, e.objective_metric, 256)) {
    if (!std::isfinite(p.value)) continue;
    if (!best || (max ? p.value > best->value : p.value < best->value)) best = p;
  }
  return best;
}

double last_value(const Store& store, int64_t trial, const std::string& name) {
  auto p = store.last_metric(trial, name);
  return p ? p->value : std::numeric_limits<double>::quiet_NaN();
}

bool contains(const std::vector<int64_t>& sorted, int64_t id) {
  return std::binary_search(sorted.begin(), sorted.end(), id);
}

// One row of the experiment page's trial table; has_metrics false: the trial reported nothing
// (Store::trials_with_metrics) and no series is looked up.
json trial_row_json(const Store& store, const TrialRow& t, const ExperimentRow& e, double now, bool has_metrics) {
  json j = trial_json(t);
  j["seconds"] = t.started_at > 0 ? json((t.ended_at > 0 ? t.ended_at : now) - t.started_at) : json(nullptr);
  if (!has_metrics) {
    for (const char* k : {"objective_best", "objective_best_step", "objective_last", "train_loss", "tokens_per_second",
                          "step_seconds"})
      j[k] = nullptr;
    return j;
  }
  const auto best = best_point(store, t.id, e);
  j["objective_best"] = best ? json(best->value) : json(nullptr);
  j["objective_best_step"] = best ? json(best->step) : json(nullptr);
  j["objective_last"] = finite_or_null(last_value(store, t.id, e.objective_metric));
  j["train_loss"] = finite_or_null(last_value(store, t.id, "train_loss"));
  j["tokens_per_second"] = finite_or_null(last_value(store, t.id, "tokens_per_second"));
  j["step_seconds"] = finite_or_null(last_value(store, t.id, "step_seconds"));
  return j;
}

// An experiments-list row: the stored experiment, its best objective over all trials, when its
// first trial started and how long it has run. Reads no trial row and no series: counts and the
// first start come from indexes, the best objective from one query of the store, kept by `best`
// until the experiment's data changes.
json experiment_row_json(const Api& api, const ExperimentRow& e, double now) {
  json j = experiment_json(e, api.store.trial_state_counts(e.id));
  const std::optional<TrialMetricPoint> best = api.best.objective_best(api.store, e);
  const double started = api.store.first_trial_start(e.id);
  j["objective_best"] = best ? json(best->point.value) : json(nullptr);
  j["objective_best_trial"] = best ? json(best->trial_id) : json(nullptr);
  j["started_at"] = started > 0 ? json(started) : json(nullptr);
  j["seconds"] = started > 0 ? json((e.ended_at > 0 ? e.ended_at : now) - started) : json(nullptr);
  return j;
}

// "1,2,3" -> trial rows of experiment `e` (all of them when empty), in the experiment's order.
std::vector<TrialRow> selected_trials(const Store& store, const ExperimentRow& e, const std::string& list) {
  if (list.empty()) return store.trials(e.id);
  std::set<int64_t> wanted;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t id = 0;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw HttpError(400, "bad_param", "trials must be a comma-separated list of trial ids, got \"" + item + "\"");
    wanted.insert(id);
  }
  std::vector<TrialRow> out;
  for (int64_t id : wanted) {
    std::optional<TrialRow> t = store.trial(id);
    if (!t || t->experiment_id != e.id)
      throw HttpError(400, "bad_param", "trial " + std::to_string(id) + " is not in experiment " + std::to_string(e.id));
    out.push_back(std::move(*t));
  }
  std::sort(out.begin(), out.end(), [](const TrialRow& a, const TrialRow& b) { return a.index < b.index; });
  return out;
}

}  // namespace

ExperimentRow experiment_or_404(const Store& store, const Request& req) {
  auto e = store.experiment(path_int(req, "id"));
  if (!e) throw HttpError(404, "not_found", "no experiment " + req.params.at("id"));
  return *e;
}

json experiment_curves_json(const Store& store, const std::vector<TrialRow>& trials, const std::string& name,
                            bool by_time, size_t points) {
  struct Loaded {
    int64_t id;
    std::vector<double> x, y;
  };
  std::vector<Loaded> loaded;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  std::set<int64_t> experiments;
  for (const TrialRow& t : trials) experiments.insert(t.experiment_id);
  std::vector<int64_t> reported;
  for (int64_t id : experiments)
    for (int64_t trial : store.trials_with_metrics(id)) reported.push_back(trial);
  std::sort(reported.begin(), reported.end());
  for (const TrialRow& t : trials) {
    Loaded l{t.id, {}, {}};
    if (!contains(reported, t.id)) {
      loaded.push_back(std::move(l));
      continue;
    }
    // Four points per bin on average keep the bins' means close to the raw series'.
    const std::vector<MetricPoint> series = store.metrics(t.id, name, points * 4);
    const double origin = t.started_at > 0 ? t.started_at : (series.empty() ? 0 : series.front().time);
    for (const MetricPoint& p : series) {
      const double x = by_time ? p.time - origin : static_cast<double>(p.step);
      l.x.push_back(x);
      l.y.push_back(p.value);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    loaded.push_back(std::move(l));
  }
  json out = {{"name", name}, {"x", by_time ? "time" : "step"}, {"grid", json::array()}, {"trials", json::array()}};
  if (!(lo <= hi)) {
    for (const Loaded& l : loaded) out["trials"].push_back({{"id", l.id}, {"values", json::array()}});
    return out;
  }
  // Steps: integer bins, one step wide when the range fits (the grid is then the steps).
  double width = (hi - lo) / static_cast<double>(points);
  if (!by_time) width = std::max(1.0, std::ceil((hi - lo + 1) / static_cast<double>(points)));
  if (width <= 0) width = 1;
  const size_t bins = std::min(points, static_cast<size_t>((hi - lo) / width) + 1);
  const auto bin_of = [&](double x) { return std::min(bins - 1, static_cast<size_t>((x - lo) / width)); };
  std::vector<char> used(bins, 0);
  std::vector<std::vector<double>> means(loaded.size());
  for (size_t k = 0; k < loaded.size(); ++k) {
    std::vector<double> sum(bins, 0);
    std::vector<int> count(bins, 0);
    for (size_t i = 0; i < loaded[k].x.size(); ++i) {
      if (!std::isfinite(loaded[k].y[i])) continue;
      const size_t b = bin_of(loaded[k].x[i]);
      sum[b] += loaded[k].y[i];
      ++count[b];
    }
    means[k].assign(bins, std::numeric_limits<double>::quiet_NaN());
    for (size_t b = 0; b < bins; ++b)
      if (count[b] > 0) {
        means[k][b] = sum[b] / count[b];
        used[b] = 1;
      }
  }
  for (size_t b = 0; b < bins; ++b)
    if (used[b]) out["grid"].push_back(by_time ? lo + (static_cast<double>(b) + 0.5) * width : lo + static_cast<double>(b) * width);
  for (size_t k = 0; k < loaded.size(); ++k) {
    json values = json::array();
    for (size_t b = 0; b < bins; ++b)
      if (used[b]) values.push_back(finite_or_null(means[k][b]));
    out["trials"].push_back({{"id", loaded[k].id}, {"values", std::move(values)}});
  }
  return out;
}

Response dashboard_experiments(const Api& api, Request& req) {
  const double now = epoch_seconds();
  json list = json::array();
  for (const ExperimentRow& e : api.store.experiments()) list.push_back(experiment_row_json(api, e, now));
  return view_response(req, {{"experiments", list}, {"now", now}});
}

// The experiment and one page of its trial table (trial_rows, next_cursor); `swept` names the keys
// the page's trials sweep, so a client that reads every page takes the union.
Response dashboard_experiment(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  const PageParams page = page_params(req);
  const double now = epoch_seconds();
  const TrialPage trials = trial_page(api.store, e.id, page.cursor, page.limit);
  json j = experiment_json(e, api.store.trial_state_counts(e.id), true);
  std::set<std::string> swept;
  json rows = json::array();
  for (const TrialRow& t : trials.rows) {
    json row = trial_row_json(api.store, t, e, now, has_metrics(api.store, t.id));
    if (row["params"].is_object())
      for (auto& [k, v] : row["params"].items()) swept.insert(k);
    rows.push_back(std::move(row));
  }
  j["swept"] = swept;
  j["trial_rows"] = std::move(rows);
  j["next_cursor"] = trials.next_cursor > 0 ? json(trials.next_cursor) : json(nullptr);
  j["now"] = now;
  return view_response(req, std::move(j));
}

Response dashboard_curves(const Api& api, Request& req) {
  const ExperimentRow e = experiment_or_404(api.store, req);
  const std::string x = query_string(req, "x", "step");
  if (x != "step" && x != "time") throw HttpError(400, "bad_param", "x must be step or time, got \"" + x + "\"");
  const int64_t points = query_int(req, "points", 400);
  if (points < 2 || points > 10000) throw HttpError(400, "bad_param", "points must be between 2 and 10000");
  const std::string name = query_string(req, "name", kDefaultCurve);
  if (name.empty()) throw HttpError(400, "bad_param", "name must be a metric name");
  const std::vector<TrialRow> trials = selected_trials(api.store, e, query_string(req, "trials"));
  return json_response(experiment_curves_json(api.store, trials, name, x == "time", static_cast<size_t>(points)));
}

}  // namespace precon::orch

#include "orchestrator/service/queries.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "orchestrator/service/views.h"
#include "orchestrator/store/objectives.h"
#include "orchestrator/study/importance_report.h"
#include "orchestrator/study/report.h"

namespace precon::orch {

using nlohmann::json;

ExperimentRow find_experiment(const Store& store, const std::string& id_or_name) {
  bool numeric = !id_or_name.empty();
  for (char c : id_or_name) numeric &= std::isdigit(static_cast<unsigned char>(c)) != 0;
  std::optional<ExperimentRow> e = numeric ? store.experiment(std::stoll(id_or_name)) : std::nullopt;
  if (!e) e = store.experiment_by_name(id_or_name);
  if (!e) throw std::out_of_range("no experiment \"" + id_or_name + "\" (`precon ls` lists them)");
  return *e;
}

namespace {

std::string label_of(const TrialRow& t) {
  json p = json::parse(t.params_json, nullptr, false);
  if (p.is_discarded() || !p.is_object() || p.empty()) return "(base config)";
  std::string s;
  for (auto& [k, v] : p.items()) {
    std::string key = k == "optimizer.name" ? "optimizer" : k;
    if (key.starts_with("optimizer.")) key = key.substr(10);
    s += (s.empty() ? "" : " ") + key + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return s;
}

}  // namespace

BestReport best_report(const Store& store, const ExperimentRow& exp) {
  const std::vector<StoredObjective> objectives = experiment_objectives(exp);
  std::vector<BestTrial> trials;
  // Only trials that reported are read: in a big sweep most wait, and have nothing to rank.
  const std::vector<int64_t> reported = store.trials_with_metrics(exp.id);
  for (const TrialRow& t : store.trials(exp.id)) {
    BestTrial b;
    b.id = t.id;
    b.label = label_of(t);
    b.state = t.state;
    b.reason = t.reason;
    if (!std::binary_search(reported.begin(), reported.end(), t.id)) {
      trials.push_back(std::move(b));
      continue;
    }
    for (const MetricPoint& p : store.metrics(t.id, exp.objective_metric)) b.objective[p.step] = p.value;
    if (objectives.size() > 1)
      for (const StoredObjective& o : objectives) {
        const auto last = store.last_metric(t.id, o.metric);
        b.finals.push_back(last ? last->value : std::numeric_limits<double>::quiet_NaN());
      }
    // Training seconds up to each step: the sum of recorded step times, scaled up when only every
    // log_every-th step was recorded.
    double cumulative = 0;
    int64_t recorded = 0;
    for (const MetricPoint& p : store.metrics(t.id, "step_seconds")) {
      if (!std::isfinite(p.value)) continue;
      b.step_seconds[p.step] = p.value;
      cumulative += p.value;
      ++recorded;
      b.elapsed[p.step] = cumulative * static_cast<double>(p.step) / static_cast<double>(recorded);
    }
    // Compute: the model's and the optimizer's FLOPs (compute_flops: Newton-Schulz, Shampoo's
    // roots, SOAP's rotations), or the model's alone from a worker that does not report them.
    for (const char* name : {"compute_flops", "flops"}) {
      for (const MetricPoint& p : store.metrics(t.id, name))
        if (std::isfinite(p.value)) b.flops[p.step] = p.value;
      if (!b.flops.empty()) break;
    }
    trials.push_back(std::move(b));
  }
  BestSettings s;
  s.metric = exp.objective_metric;
  s.mode = exp.objective_mode;
  if (objectives.size() > 1)
    for (const StoredObjective& o : objectives) {
      s.metrics.push_back(o.metric);
      s.modes.push_back(o.mode);
    }
  return rank_trials(trials, s);
}

void BestCache::store_written(const char* op) {
  // Metric points are told apart by metrics_stored, per experiment.
  if (std::string_view(op) != "insert_metrics") ++global_;
}

void BestCache::metrics_stored(int64_t experiment_id) {
  std::lock_guard lock(mu_);
  ++local_[experiment_id];
}

template <class T, class Compute>
std::shared_ptr<const T> BestCache::kept(Shelf<T>& shelf, int64_t experiment_id, Compute compute) {
  std::shared_ptr<std::mutex> gate;
  {
    std::lock_guard lock(mu_);
    std::shared_ptr<std::mutex>& slot = shelf.computing[experiment_id];
    if (!slot) slot = std::make_shared<std::mutex>();
    gate = slot;
  }
  std::lock_guard computing(*gate);
  uint64_t global = 0, local = 0;
  {
    std::lock_guard lock(mu_);
    // Read before the store is: a write meanwhile leaves what is computed stale, never kept as current.
    global = global_.load();
    local = local_[experiment_id];
    const auto it = shelf.kept.find(experiment_id);
    if (it != shelf.kept.end() && it->second.global == global && it->second.local == local) {
      it->second.used = ++clock_;
      return it->second.value;
    }
  }
  auto fresh = std::make_shared<const T>(compute());
  std::lock_guard lock(mu_);
  shelf.kept[experiment_id] = {global, local, ++clock_, fresh};
  while (shelf.kept.size() > kKept) {
    auto oldest = shelf.kept.begin();
    for (auto it = shelf.kept.begin(); it != shelf.kept.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    shelf.kept.erase(oldest);
  }
  return fresh;
}

std::shared_ptr<const BestReport> BestCache::report(const Store& store, const ExperimentRow& experiment) {
  return kept(reports_, experiment.id, [&] {
    BestReport r = best_report(store, experiment);
    ++computed_;
    return r;
  });
}

std::shared_ptr<const json> BestCache::study(const Store& store, const ExperimentRow& experiment) {
  return kept(studies_, experiment.id, [&] {
    json r = study::study_report(store, experiment.id);
    ++studies_computed_;
    return r;
  });
}

std::shared_ptr<const json> BestCache::importance(const Store& store, const ExperimentRow& experiment) {
  return kept(importances_, experiment.id, [&] {
    try {
      json j = study::importance_to_json(study::importance_report(store, experiment.id));
      j["ok"] = true;
      j["reason"] = "";
      return j;
    } catch (const study::ImportanceError& e) {
      // Nothing to rank yet: an answer, not an error (the dashboard asks while trials still run).
      return json{{"experiment", experiment.id}, {"metric", experiment.objective_metric}, {"method", "fanova"},
                  {"ok", false}, {"reason", e.what()}, {"trials", 0}, {"params", json::array()},
                  {"importance", json::array()}, {"notes", json::array()}};
    }
  });
}

std::optional<TrialMetricPoint> BestCache::objective_best(const Store& store, const ExperimentRow& experiment) {
  uint64_t global = 0, local = 0;
  {
    std::lock_guard lock(mu_);
    // Read before the store is, as report() does.
    global = global_.load();
    local = local_[experiment.id];
    const auto it = objective_bests_.find(experiment.id);
    if (it != objective_bests_.end() && it->second.global == global && it->second.local == local) return it->second.best;
  }
  std::optional<TrialMetricPoint> fresh =
      store.best_metric(experiment.id, experiment.objective_metric, maximizes(experiment.objective_mode));
  std::lock_guard lock(mu_);
  objective_bests_[experiment.id] = {global, local, fresh};
  return fresh;
}

namespace {
template <class T>
std::vector<T> slice(const std::vector<T>& all, size_t offset, size_t limit, bool& more) {
  if (offset >= all.size()) return {};
  const size_t end = std::min(all.size(), offset + limit);
  more |= end < all.size();
  return std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(offset), all.begin() + static_cast<std::ptrdiff_t>(end));
}
}  // namespace

BestPage best_page(const BestReport& full, size_t offset, size_t limit) {
  BestPage page;
  bool more = false;
  page.report.settings = full.settings;
  for (auto [to, from] : {std::pair{&page.report.at_step, &full.at_step}, std::pair{&page.report.at_time, &full.at_time},
                          std::pair{&page.report.at_flops, &full.at_flops}}) {
    to->defined = from->defined;
    to->at = from->at;
    to->entries = slice(from->entries, offset, limit, more);
  }
  page.report.pareto = slice(full.pareto, offset, limit, more);
  page.report.front = slice(full.front, offset, limit, more);
  if (more) page.next_cursor = static_cast<int64_t>(offset + limit);
  return page;
}

bool has_metrics(const Store& store, int64_t trial_id) { return !store.metric_names(trial_id).empty(); }

json trial_summary_json(const Store& store, const TrialRow& t, const ExperimentRow& exp, bool has_metrics) {
  json j = trial_json(t);
  j["label"] = label_of(t);
  if (!has_metrics) {
    for (const char* k : {"objective", "objective_step", "train_loss", "step_seconds", "memory_peak_bytes"}) j[k] = nullptr;
    return j;
  }
  auto last = store.last_metric(t.id, exp.objective_metric);
  j["objective"] = last && std::isfinite(last->value) ? json(last->value) : json(nullptr);
  j["objective_step"] = last ? json(last->step) : json(nullptr);
  auto loss = store.last_metric(t.id, "train_loss");
  j["train_loss"] = loss && std::isfinite(loss->value) ? json(loss->value) : json(nullptr);
  auto sps = store.last_metric(t.id, "step_seconds");
  j["step_seconds"] = sps && std::isfinite(sps->value) ? json(sps->value) : json(nullptr);
  // The largest rank's peak resident memory (the worker reports the maximum over its ranks).
  auto peak = store.last_metric(t.id, "memory_peak_bytes");
  j["memory_peak_bytes"] = peak && std::isfinite(peak->value) ? json(peak->value) : json(nullptr);
  return j;
}

json trial_metrics_json(const Store& store, int64_t trial_id, const std::string& name, size_t max_points) {
  json out = json::object();
  std::vector<std::string> names = name.empty() ? store.metric_names(trial_id) : std::vector<std::string>{name};
  for (const std::string& n : names) out[n] = metric_points_json(store.metrics(trial_id, n, max_points));
  return out;
}

}  // namespace precon::orch

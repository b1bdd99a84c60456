#include "orchestrator/service/queries.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "orchestrator/service/views.h"

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
    for (const MetricPoint& p : store.metrics(t.id, "flops"))
      if (std::isfinite(p.value)) b.flops[p.step] = p.value;
    trials.push_back(std::move(b));
  }
  BestSettings s;
  s.metric = exp.objective_metric;
  s.mode = exp.objective_mode;
  return rank_trials(trials, s);
}

json trial_summary_json(const Store& store, const TrialRow& t, const ExperimentRow& exp, bool has_metrics) {
  json j = trial_json(t);
  j["label"] = label_of(t);
  if (!has_metrics) {
    for (const char* k : {"objective", "objective_step", "train_loss", "step_seconds"}) j[k] = nullptr;
    return j;
  }
  auto last = store.last_metric(t.id, exp.objective_metric);
  j["objective"] = last && std::isfinite(last->value) ? json(last->value) : json(nullptr);
  j["objective_step"] = last ? json(last->step) : json(nullptr);
  auto loss = store.last_metric(t.id, "train_loss");
  j["train_loss"] = loss && std::isfinite(loss->value) ? json(loss->value) : json(nullptr);
  auto sps = store.last_metric(t.id, "step_seconds");
  j["step_seconds"] = sps && std::isfinite(sps->value) ? json(sps->value) : json(nullptr);
  return j;
}

json trial_metrics_json(const Store& store, int64_t trial_id, const std::string& name, size_t max_points) {
  json out = json::object();
  std::vector<std::string> names = name.empty() ? store.metric_names(trial_id) : std::vector<std::string>{name};
  for (const std::string& n : names) out[n] = metric_points_json(store.metrics(trial_id, n, max_points));
  return out;
}

}  // namespace precon::orch

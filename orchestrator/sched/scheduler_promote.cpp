// Promotion (asynchronous successive halving): a trial ASHA or Hyperband stopped at a rung ends as
// pruned with its checkpoint; once the values recorded at that rung since put it in the top
// 1/reduction_factor, it is pending again and its next attempt resumes from that checkpoint, on to
// the next rung. Everything is derived from the store (the objective's points, the early_stop and
// trial_promoted events), so a restarted controller promotes what its predecessor had not yet.
#include "orchestrator/sched/scheduler.h"

#include <algorithm>
#include <cmath>

#include "orchestrator/sched/scheduler_live.h"

namespace precon::orch {

using nlohmann::json;

namespace {

// Whether the experiment's stored rule promotes (asha or hyperband, with "promote": true).
bool promotes(const ExperimentRow& exp) {
  const json es = json::parse(exp.early_stop_json.empty() ? "{}" : exp.early_stop_json, nullptr, false);
  if (!es.is_object() || !es.value("promote", false)) return false;
  const std::string method = es.value("method", "none");
  return method == "asha" || method == "hyperband";
}

}  // namespace

EarlyStopper* Scheduler::stopper_for(int64_t exp_id) {
  auto& stopper = stoppers_[exp_id];
  if (stopper) return stopper.get();
  auto exp = store_.experiment(exp_id);
  if (!exp) return nullptr;
  const json es = json::parse(exp->early_stop_json.empty() ? "{}" : exp->early_stop_json);
  const EarlyStopSettings s = early_stop_settings_from_json(es, exp->objective_metric, exp->objective_mode, exp->name);
  try {
    stopper = std::make_unique<EarlyStopper>(s);
  } catch (const EarlyStopError& e) {
    // Recipes are checked when submitted; a stored rule that no longer holds stops nothing.
    log("experiment " + std::to_string(exp_id) + ": no early stopping: " + e.what());
    EarlyStopSettings none;
    none.method = "none";
    stopper = std::make_unique<EarlyStopper>(none);
  }
  // History from the store (a restarted controller has no curves in memory).
  for (int64_t id : store_.trials_with_metrics(exp_id))
    for (const MetricPoint& p : store_.metrics(id, exp->objective_metric))
      if (std::isfinite(p.value)) curves_[exp_id][id][p.step] = p.value;
  // A cancelled experiment (before a restart) promotes nothing.
  if (!store_.events_of_kind(exp_id, "experiment_cancel").empty()) cancelled_experiments_.insert(exp_id);
  // The rung each trial was last stopped at, unless promoted since (its events in order).
  if (const std::string& m = stopper->settings().method; m == "asha" || m == "hyperband") {
    std::vector<EventRow> events = store_.events_of_kind(exp_id, "early_stop");
    for (EventRow& e : store_.events_of_kind(exp_id, "trial_promoted")) events.push_back(std::move(e));
    std::sort(events.begin(), events.end(), [](const EventRow& a, const EventRow& b) { return a.id < b.id; });
    auto& stopped = stopped_rungs_[exp_id];
    for (const EventRow& e : events) {
      if (e.kind == "trial_promoted") {
        stopped.erase(e.trial_id);
        continue;
      }
      const json data = json::parse(e.data_json, nullptr, false);
      if (data.is_object() && data.contains("rung") && data["rung"].is_number_integer())
        stopped[e.trial_id] = data["rung"].get<int64_t>();
    }
  }
  return stopper.get();
}

TrialNumbers& Scheduler::trial_numbers(int64_t exp_id, const EarlyStopper& stopper) {
  // Hyperband's brackets follow each trial's number in the experiment (its place in the sweep).
  TrialNumbers& numbers = trial_numbers_[exp_id];
  if (stopper.brackets() > 0) {
    for (const auto& [id, points] : curves_[exp_id]) {
      if (numbers.contains(id)) continue;
      if (const auto row = store_.trial(id)) numbers[id] = row->index;
    }
  }
  return numbers;
}

void Scheduler::promote_ready(int64_t exp_id) {
  const EarlyStopper* stopper = stopper_for(exp_id);
  if (!stopper || !stopper->settings().promote) return;
  if (cancelled_experiments_.count(exp_id)) return;  // a cancelled experiment runs nothing more
  auto& stopped = stopped_rungs_[exp_id];
  if (stopped.empty()) return;
  const std::vector<Promotion> ready = stopper->promotions(curves_[exp_id], stopped, trial_numbers(exp_id, *stopper));
  for (const Promotion& p : ready) {
    EventRow e;
    e.time = epoch_seconds();
    e.experiment_id = exp_id;
    e.trial_id = p.trial;
    e.kind = "trial_promoted";
    e.message = p.reason + "; resumes from its checkpoint";
    e.data_json = p.data.dump();
    // Only a trial that has ended as pruned: one still stopping is promoted when it ends (end_trial).
    if (!store_.promote_trial(p.trial, e.message, e)) continue;
    stopped.erase(p.trial);
    log("trial " + std::to_string(p.trial) + " " + e.message);
  }
}

void Scheduler::promote_after_restart() {
  for (const ExperimentRow& exp : store_.experiments_in_state(ExperimentState::running)) {
    if (promotes(exp)) promote_ready(exp.id);
  }
}

std::optional<std::string> Scheduler::stop_decided_for(const TrialRow& trial, const AttemptRow& attempt) const {
  std::optional<std::string> reason;
  for (const EventRow& e : store_.events_of_kind(trial.experiment_id, "early_stop"))
    if (e.trial_id == trial.id && e.time >= attempt.started_at) reason = e.message;
  return reason;
}

}  // namespace precon::orch

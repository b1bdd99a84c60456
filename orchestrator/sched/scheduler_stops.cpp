// Stops: cancellation and early stopping ask a trial to stop; a running worker hears it in its
// next report answer, then gets SIGTERM after the grace period and SIGKILL after twice that. A
// recipe's own program gets SIGTERM at once and SIGKILL after the grace period.
#include "orchestrator/sched/scheduler.h"

#include <cmath>
#include <stdexcept>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/sched/scheduler_live.h"
#include "orchestrator/store/objectives.h"

namespace precon::orch {

using nlohmann::json;

void Scheduler::request_stop(int64_t trial_id, TrialState final_state, const std::string& reason) {
  auto trial = store_.trial(trial_id);
  if (!trial || is_terminal(trial->state)) return;
  auto it = live_.find(trial_id);
  if (it == live_.end()) {  // not running: ends now
    end_trial(*trial, final_state, reason);
    return;
  }
  Live& live = *it->second;
  if (live.stop_requested) return;
  live.stop_requested = true;
  live.stop_state = final_state;
  live.stop_reason = reason;
  live.stop_at = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(shared_mu_);
    stop_answers_[trial_id] = reason;
  }
  // An attempt that has not reported yet (a Slurm job still pending, a worker still starting)
  // cannot hear the stop answer: signal it now instead of after the grace period. Nor can a
  // program that reports through its metrics.jsonl.
  if (live.user_program || (live.start_step >= 0 && trial->last_step == live.start_step)) {
    live.executor->signal_stop(live.handle);
    live.sigterm_sent = true;
  }
}

void Scheduler::escalate_stops() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [trial_id, live] : live_) {
    if (!live->stop_requested) continue;
    const auto kill_after = live->user_program ? options_.stop_grace : 2 * options_.stop_grace;
    if (!live->sigterm_sent && now - live->stop_at > options_.stop_grace) {
      live->executor->signal_stop(live->handle);
      live->sigterm_sent = true;
    } else if (!live->sigkill_sent && now - live->stop_at > kill_after) {
      live->executor->kill(live->handle);
      live->sigkill_sent = true;
    }
  }
}

void Scheduler::early_stop_check(int64_t trial_id, int64_t step, double value) {
  auto trial = store_.trial(trial_id);
  if (!trial || is_terminal(trial->state)) return;
  // A trial already being stopped gets no further decisions (its late reports are stored only).
  if (auto live = live_.find(trial_id); live != live_.end() && live->second->stop_requested) return;
  const int64_t exp_id = trial->experiment_id;
  EarlyStopper* stopper = stopper_for(exp_id);
  if (!stopper) return;
  if (stopper->settings().method == "pareto") {
    // Several objectives: the trial's vector at this step against the completed trials' at it,
    // all read from the store (the report that brought this point stored its other objectives).
    if (!stopper_seen_[trial_id].insert(step).second) return;
    const auto exp = store_.experiment(exp_id);
    if (!exp) return;
    const std::vector<StoredObjective> objectives = experiment_objectives(*exp);
    std::vector<std::string> metrics;
    std::vector<bool> maximize;
    for (const StoredObjective& o : objectives) {
      metrics.push_back(o.metric);
      maximize.push_back(o.mode == "max");
    }
    auto vector_at = [&](int64_t id) {
      std::vector<double> v;
      for (const std::string& m : metrics) {
        const auto p = store_.metric_at_or_before(id, m, step);
        if (!p || p->step != step) return std::vector<double>{};
        v.push_back(p->value);
      }
      return v;
    };
    std::map<int64_t, std::vector<double>> completed_at;
    for (int64_t id : store_.trial_ids(exp_id, TrialState::completed))
      if (std::vector<double> v = vector_at(id); !v.empty()) completed_at[id] = std::move(v);
    const EarlyStopSettings& es = stopper->settings();
    StopDecision d = pareto_stop(trial_id, step, vector_at(trial_id), completed_at, metrics, maximize, es.min_step,
                                 es.min_dominating);
    if (options_.metrics && !d.rule.empty()) options_.metrics->early_stop_decision(d.stop);
    if (!d.stop) return;
    event(exp_id, trial_id, "early_stop", d.reason, d.data);
    request_stop(trial_id, TrialState::pruned, d.reason);
    return;
  }
  // A resent or resumed step was judged already: each point is decided once.
  auto& own = curves_[exp_id][trial_id];
  if (own.count(step) && stopper_seen_[trial_id].count(step)) return;
  own[step] = value;
  stopper_seen_[trial_id].insert(step);
  const std::vector<int64_t> done = store_.trial_ids(exp_id, TrialState::completed);
  const std::set<int64_t> completed(done.begin(), done.end());
  // Trials stopped at a rung count there only up to it (points that were in flight past it do not).
  auto& stopped = stopped_rungs_[exp_id];
  StopDecision d = stopper->report(trial_id, step, value, curves_[exp_id], completed, stopped,
                                   trial_numbers(exp_id, *stopper));
  if (options_.metrics) options_.metrics->early_stop_decision(d.stop);
  if (d.stop) {
    if (d.data.contains("rung")) stopped[trial_id] = d.data["rung"].get<int64_t>();
    event(exp_id, trial_id, "early_stop", d.reason, d.data);
    request_stop(trial_id, TrialState::pruned, d.reason);
  }
  // A value recorded at a rung can lift a trial stopped there before into the top 1/reduction_factor.
  if (d.data.contains("rungs")) promote_ready(exp_id);
}

bool Scheduler::cancel_experiment(int64_t experiment_id, const std::string& reason) {
  return call([&] {
    const auto exp = store_.experiment(experiment_id);
    if (!exp) throw std::out_of_range("no experiment " + std::to_string(experiment_id));
    if (exp->state != ExperimentState::running) return false;
    cancelled_experiments_.insert(experiment_id);  // no more TPE trials, no promotions
    // Pending trials end in one transaction (an event each), however many there are; only the
    // running ones need a stop request each.
    const std::vector<int64_t> cancelled = store_.cancel_pending_trials(experiment_id, reason, epoch_seconds());
    {
      std::lock_guard lock(shared_mu_);
      for (int64_t id : cancelled)
        if (auto it = tokens_.find(id); it != tokens_.end()) it->second.finished = true;
    }
    if (options_.metrics)
      for (int64_t id : cancelled) options_.metrics->trial_ended(id);
    if (!cancelled.empty())
      log("experiment " + std::to_string(experiment_id) + ": " + std::to_string(cancelled.size()) +
          " pending trial(s) cancelled: " + reason);
    for (int64_t id : store_.trial_ids(experiment_id, TrialState::running))
      request_stop(id, TrialState::cancelled, reason);
    event(experiment_id, 0, "experiment_cancel", reason);
    maybe_finish_experiment(experiment_id);
    return true;
  });
}

bool Scheduler::cancel_trial(int64_t trial_id, const std::string& reason) {
  return call([&] {
    const auto trial = store_.trial(trial_id);
    if (!trial) throw std::out_of_range("no trial " + std::to_string(trial_id));
    if (is_terminal(trial->state)) return false;
    request_stop(trial_id, TrialState::cancelled, reason);
    return true;
  });
}

}  // namespace precon::orch

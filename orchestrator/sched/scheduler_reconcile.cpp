// Reconciling after a controller restart: attempts left open are adopted (their workers still
// run) or settled, so that no trial is lost or run twice.
#include "orchestrator/sched/scheduler.h"

#include <algorithm>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/sched/scheduler_live.h"

namespace precon::orch {


void Scheduler::reconcile() {
  // Attempts left open by a previous controller: adopt the workers still running, settle the rest.
  for (const AttemptRow& a : store_.open_attempts()) {
    auto trial = store_.trial(a.trial_id);
    if (!trial) continue;
    auto it = executors_.find(a.executor);
    if (it == executors_.end()) {
      AttemptRow done = a;
      done.state = AttemptState::lost;
      done.ended_at = epoch_seconds();
      done.detail = "executor " + a.executor + " is not configured in this controller";
      store_.update_attempt(done);
      finish_attempt(a.trial_id, ExitStatus{ExitKind::lost, -1, 0, done.detail});
      continue;
    }
    Handle h;
    h.executor = a.executor;
    h.external_id = a.external_id;
    h.nodes = a.nodes;
    h.trial_id = a.trial_id;
    h.attempt = a.number;
    h.run_dir = trial->run_dir;
    auto live = std::make_unique<Live>();
    live->attempt_id = a.id;
    live->handle = h;
    live->executor = it->second;
    try {
      live->user_program = !parse_stored_trial(trial->config_toml, "trial " + std::to_string(a.trial_id)).command.empty();
    } catch (const std::exception&) {
      // It parsed when the attempt was launched; one that no longer does is taken for precon-train's.
    }
    live_[a.trial_id] = std::move(live);
    if (trial->state == TrialState::pending) {
      // The controller died between recording the attempt and marking the trial running: as
      // pending it would be launched a second time beside the attempt adopted here.
      TrialRow t = *trial;
      t.state = TrialState::running;
      t.attempts = std::max(t.attempts, a.number);
      if (t.started_at == 0) t.started_at = a.started_at;
      store_.update_trial(t);
    }
    if (options_.metrics) {
      auto exp = store_.experiment(trial->experiment_id);
      options_.metrics->trial_active(a.trial_id, exp ? exp->name : "");
    }
    // An early stop decided before the restart still ends the attempt as pruned.
    Live& adopted = *live_[a.trial_id];
    if (const std::optional<std::string> reason = stop_decided_for(*trial, a)) {
      adopted.stop_requested = true;
      adopted.stop_state = TrialState::pruned;
      adopted.stop_reason = *reason;
      adopted.stop_at = std::chrono::steady_clock::now();
      std::lock_guard lock(shared_mu_);
      stop_answers_[a.trial_id] = *reason;
    }
    std::optional<ExitStatus> status = it->second->adopt(h);
    if (!status && adopted.stop_requested && adopted.user_program) {
      it->second->signal_stop(h);  // a program hears a stop by SIGTERM only
      adopted.sigterm_sent = true;
    }
    if (status) {
      finish_attempt(a.trial_id, *status);
    } else {
      event(trial->experiment_id, trial->id, "attempt_adopted",
            "controller restarted: re-attached to running worker " + a.external_id);
    }
  }
  // Trials marked running without an open attempt (the controller died between the two writes).
  for (TrialRow t : store_.trials_in_state(TrialState::running)) {
    if (live_.count(t.id)) continue;
    t.state = TrialState::pending;
    store_.update_trial(t);
  }
  // Promotions a stopped controller had not made yet, before an experiment is taken for finished.
  promote_after_restart();
  // Experiments whose trials all ended while the controller was down.
  for (const ExperimentRow& exp : store_.experiments())
    if (exp.state == ExperimentState::running) maybe_finish_experiment(exp.id);
}

}  // namespace precon::orch

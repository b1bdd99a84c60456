// Attempt outcomes: ended attempts collected from the executors, each classified (completed,
// requeued, retried, failed at once), and the ending of trials and experiments.
#include "orchestrator/sched/scheduler.h"

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/sched/metrics_backfill.h"
#include "orchestrator/sched/scheduler_live.h"

namespace precon::orch {


namespace {

// A failed trial's reason for people: the trainer's own error line when it wrote one, then the
// short context (how it exited, how often it was tried); else where to look.
std::string failure_reason(const std::string& trainer_error, const ExitStatus& status, const std::string& attempts,
                           const std::string& run_dir) {
  if (!trainer_error.empty()) return trainer_error + " (" + status.detail + ", " + attempts + ")";
  return status.detail + ", " + attempts + "; see " + trainer_stderr_path(run_dir).string();
}

}  // namespace

void Scheduler::collect_finished() {
  for (auto& [name, ex] : executors_) {
    std::vector<std::pair<Handle, ExitStatus>> ended;
    const auto t0 = std::chrono::steady_clock::now();
    bool failed = false;
    try {
      ended = ex->poll();
    } catch (const std::exception& e) {
      failed = true;  // the other executors are still polled; this one is tried again next tick
      log("executor " + name + ": poll failed: " + e.what());
    }
    if (options_.metrics)
      options_.metrics->executor_polled(
          name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), failed);
    try {
      for (auto& [handle, note] : ex->state_changes()) note_attempt_state(ex, handle, note);
    } catch (const std::exception& e) {
      note_store_error(e);
      log("executor " + name + ": a state note was not stored: " + e.what());
    }
    for (auto& [handle, status] : ended) {
      for (auto& [trial_id, live] : live_) {
        if (live->handle.external_id == handle.external_id && live->executor == ex) {
          unsettled_.emplace_back(trial_id, status);
          break;
        }
      }
    }
  }
  settle_ended();
}

void Scheduler::settle_ended() {
  while (!unsettled_.empty()) {
    const auto [trial_id, status] = unsettled_.front();
    try {
      finish_attempt(trial_id, status);
    } catch (const std::exception& e) {
      note_store_error(e);
      log("trial " + std::to_string(trial_id) + ": the end of its attempt (" + status.detail +
          ") is not stored yet, retrying: " + e.what());
      return;
    }
    unsettled_.erase(unsettled_.begin());
  }
}

void Scheduler::note_attempt_state(Executor* ex, const Handle& h, const std::string& note) {
  for (auto& [trial_id, live] : live_) {
    if (live->executor != ex || live->handle.external_id != h.external_id || live->handle.attempt != h.attempt) continue;
    if (!h.nodes.empty() && h.nodes != live->handle.nodes) {
      live->handle.nodes = h.nodes;
      for (AttemptRow a : store_.attempts(trial_id)) {
        if (a.id != live->attempt_id) continue;
        a.nodes = h.nodes;
        store_.update_attempt(a);
      }
    }
    if (auto trial = store_.trial(trial_id)) event(trial->experiment_id, trial_id, "attempt_state", note);
    return;
  }
}

void Scheduler::finish_attempt(int64_t trial_id, const ExitStatus& ended) {
  ExitStatus status = ended;
  auto it = live_.find(trial_id);
  if (it == live_.end()) return;
  std::unique_ptr<Live> live = std::move(it->second);
  live_.erase(it);
  if (options_.metrics) {
    options_.metrics->trial_inactive(trial_id);
    if (!live->stop_requested && status.kind == ExitKind::requeue) options_.metrics->attempt_requeued(live->handle.executor);
    if (!live->stop_requested && status.kind != ExitKind::requeue && status.kind != ExitKind::succeeded)
      options_.metrics->attempt_failed(live->handle.executor);
  }
  // A store that fails (a full disk) leaves the attempt live, for settle_ended() to try again:
  // the executor has forgotten it, and nothing else would ever end the trial.
  try {
    auto trial_opt = store_.trial(trial_id);
    if (!trial_opt) return;
    TrialRow trial = *trial_opt;
    auto exp = store_.experiment(trial.experiment_id);
    // This attempt's lines only: the log holds every attempt's, and an earlier error is not this one's.
    // A recipe's own program says why in its last line (a Python traceback's last, say).
    const std::string trainer_error =
        status.kind == ExitKind::succeeded || status.kind == ExitKind::requeue ? std::string()
        : live->user_program ? program_last_words(trial.run_dir, live->stderr_offset)
                             : trainer_error_message(trial.run_dir, live->stderr_offset);
    // A launcher's exit code (mpirun's 137) says little: which rank died of which signal, when it
    // said so, goes with it.
    if (status.kind != ExitKind::succeeded && status.kind != ExitKind::requeue)
      if (const std::string deaths = launcher_rank_deaths(trial.run_dir, live->stderr_offset); !deaths.empty())
        status.detail += ": " + deaths;

    for (AttemptRow a : store_.attempts(trial_id)) {
      if (a.id != live->attempt_id) continue;
      a.ended_at = epoch_seconds();
      a.exit_code = status.code;
      a.detail = trainer_error.empty() ? status.detail : status.detail + ": " + trainer_error;
      switch (status.kind) {
        case ExitKind::succeeded: a.state = live->stop_requested ? AttemptState::stopped : AttemptState::succeeded; break;
        case ExitKind::requeue: a.state = AttemptState::requeue; break;
        case ExitKind::killed:
        case ExitKind::out_of_memory: a.state = AttemptState::killed; break;
        case ExitKind::lost: a.state = AttemptState::lost; break;
        default: a.state = AttemptState::failed;
      }
      store_.update_attempt(a);
    }
    // Reports the worker could not deliver (the controller down or its disk full near the end;
    // a finished trial refuses late ones): metrics.jsonl has them, from the last stored step on.
    // Only points the store lacks: the last stored step's record is usually there already.
    // A program's lines are followed: the last ones, up to its end, now.
    if (live->user_program) {
      follow(trial_id, trial.run_dir, true);
    } else {
      std::vector<MetricPoint> missed;
      for (MetricPoint& p : metrics_from_step(std::filesystem::path(trial.run_dir) / "metrics.jsonl", trial.last_step)) {
        const std::optional<MetricPoint> have = store_.metric_at_or_before(trial_id, p.name, p.step);
        if (!have || have->step != p.step) missed.push_back(std::move(p));
      }
      if (!missed.empty()) store_.insert_metrics(trial_id, missed);
    }
    record_checkpoints(trial);
    {
      std::lock_guard lock(shared_mu_);
      stop_answers_.erase(trial_id);
    }

    if (live->stop_requested) {
      if (status.continues) {  // the executor restarted the job; it must not run again
        Handle next = live->handle;
        next.attempt += 1;
        live->executor->kill(next);
      }
      end_trial(trial, live->stop_state, live->stop_reason);
      return;
    }
    const int64_t max_attempts = exp ? exp->max_attempts : 1;
    const std::string note = live->user_program ? skipped_lines_note(trial_id) : "";
    switch (status.kind) {
      case ExitKind::succeeded:
        if (const std::string missing = live->user_program ? objective_missing(trial, exp ? &*exp : nullptr) : "";
            !missing.empty()) {  // nothing to rank it by; running it again would not change that
          end_trial(trial, TrialState::failed, missing + note);
          return;
        }
        end_trial(trial, TrialState::completed, live->user_program ? "the program exited 0" + note : "trained to the last step");
        return;
      case ExitKind::requeue:
        // Preempted or signalled: resumes from its checkpoint; does not count as a failure.
        if (status.continues) {
          continue_attempt(trial, std::move(live), status);
          return;
        }
        trial.state = TrialState::pending;
        store_.update_trial(trial);
        event(trial.experiment_id, trial.id, "attempt_requeued", "worker asked to be requeued: " + status.detail);
        return;
      case ExitKind::usage:
        // A bad configuration fails the same way every time: the trial fails at once.
        end_trial(trial, TrialState::failed, failure_reason(trainer_error, status, "not retried", trial.run_dir) + note);
        return;
      case ExitKind::out_of_memory:
        // The same run needs the same memory: killed again on every attempt. The reason leads with it.
        end_trial(trial, TrialState::failed, status.detail + note);
        return;
      default: {
        // Requeued attempts (preemption, time limits) are not failures; count only the others.
        int64_t failures = 0;
        for (const AttemptRow& a : store_.attempts(trial_id))
          failures += a.state == AttemptState::failed || a.state == AttemptState::killed || a.state == AttemptState::lost;
        const std::string count = std::to_string(failures) + " failed attempt(s)";
        if (failures < max_attempts) {
          trial.state = TrialState::pending;
          store_.update_trial(trial);
          if (options_.metrics) options_.metrics->trial_failed_attempts(trial.id, exp ? exp->name : "", failures);
          const std::string why = trainer_error.empty() ? status.detail : trainer_error + "; " + status.detail;
          event(trial.experiment_id, trial.id, "attempt_failed",
                "attempt " + std::to_string(trial.attempts) + " failed (" + why + "; " + std::to_string(failures) +
                    " of " + std::to_string(max_attempts) + " allowed failures); retrying from the last checkpoint");
          log("trial " + std::to_string(trial.id) + ": attempt failed (" + why + "), retrying");
        } else {
          end_trial(trial, TrialState::failed, failure_reason(trainer_error, status, "after " + count, trial.run_dir) + note);
        }
      }
    }
  } catch (...) {
    if (live) live_[trial_id] = std::move(live);
    throw;
  }
}

void Scheduler::continue_attempt(TrialRow& trial, std::unique_ptr<Live> live, const ExitStatus& status) {
  // The executor already requeued the same job (Slurm): its next run is the next attempt.
  Handle next = live->handle;
  next.attempt += 1;
  live->attempt_id = add_attempt(trial.id, next);
  live->handle = next;
  live->stderr_offset = sched_detail::stderr_size(trial.run_dir);
  live_[trial.id] = std::move(live);
  if (options_.metrics) {
    auto exp = store_.experiment(trial.experiment_id);
    options_.metrics->trial_active(trial.id, exp ? exp->name : "");
  }
  trial.state = TrialState::running;
  trial.attempts = next.attempt;
  store_.update_trial(trial);
  event(trial.experiment_id, trial.id, "attempt_requeued",
        "attempt " + std::to_string(next.attempt - 1) + " requeued (" + status.detail + "); attempt " +
            std::to_string(next.attempt) + " continues in " + next.executor + " job " + next.external_id);
}

void Scheduler::end_trial(TrialRow& trial, TrialState state, const std::string& reason) {
  if (is_terminal(trial.state)) return;  // a trial ends exactly once
  if (options_.metrics) {
    options_.metrics->trial_inactive(trial.id);
    options_.metrics->trial_ended(trial.id);
  }
  trial.state = state;
  trial.reason = reason;
  trial.ended_at = epoch_seconds();
  store_.update_trial(trial);
  followers_.erase(trial.id);
  {
    std::lock_guard lock(shared_mu_);
    if (auto it = tokens_.find(trial.id); it != tokens_.end()) it->second.finished = true;
  }
  event(trial.experiment_id, trial.id, std::string("trial_") + trial_state_name(state), reason);
  log("trial " + std::to_string(trial.id) + " " + trial_state_name(state) + ": " + reason);
  // A trial stopped at a rung may have become promotable while it was still stopping (or while no
  // controller ran: a restarted one settles the attempts it finds ended before anything else).
  if (state == TrialState::pruned) promote_ready(trial.experiment_id);
  maybe_finish_experiment(trial.experiment_id);
}

void Scheduler::maybe_finish_experiment(int64_t experiment_id) {
  auto exp = store_.experiment(experiment_id);
  if (!exp || exp->state != ExperimentState::running) return;
  // From the index on (experiment, state): ending each of N trials costs O(log N), not O(N).
  const std::map<TrialState, int64_t> counts = store_.trial_state_counts(experiment_id);
  if (counts.count(TrialState::pending) || counts.count(TrialState::running)) return;
  if (const Recipe* tpe = tpe_recipe(*exp); tpe && !cancelled_experiments_.count(experiment_id)) {
    // TPE makes its trials as slots free up: the experiment ends once `samples` exist.
    int64_t made = 0;
    for (const auto& [state, n] : counts) made += n;
    if (made < tpe->sweep.samples) return;
  }
  const ExperimentState state = counts.count(TrialState::cancelled) ? ExperimentState::cancelled : ExperimentState::completed;
  store_.set_experiment_state(experiment_id, state, epoch_seconds());
  event(experiment_id, 0, std::string("experiment_") + experiment_state_name(state),
        "experiment " + exp->name + " " + experiment_state_name(state));
}

}  // namespace precon::orch

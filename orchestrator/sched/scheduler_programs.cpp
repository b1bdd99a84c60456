// Trials that run a recipe's own program (docs/recipes.md, Trials that run any program): the
// metrics.jsonl each one appends to, followed at every pass, and what its trial's reason says
// about what it reported.
#include "orchestrator/sched/scheduler.h"

#include <cmath>

#include "orchestrator/obs/controller_metrics.h"
#include "orchestrator/sched/scheduler_live.h"

namespace precon::orch {

namespace {

// Problems of one trial told as events; later ones are counted in its reason only.
constexpr int64_t kProblemEvents = 10;

}  // namespace

void Scheduler::follow_metrics() {
  for (auto& [trial_id, live] : live_)
    if (live->user_program) follow(trial_id, live->handle.run_dir.string(), false);
}

void Scheduler::follow(int64_t trial_id, const std::string& run_dir, bool at_end) {
  auto it = followers_.find(trial_id);
  if (it == followers_.end()) {
    const std::optional<TrialRow> row = store_.trial(trial_id);
    const int64_t stored_through = row && store_.metric_count(trial_id) > 0 ? row->last_step : -1;
    it = followers_.emplace(trial_id, Followed{MetricsFollower(std::filesystem::path(run_dir) / "metrics.jsonl"), stored_through})
             .first;
  }
  MetricsFollower& follower = it->second.file;
  const int64_t judged_through = it->second.judged_through;
  const int64_t told = follower.problems();
  MetricsFollower::Batch batch = follower.read(at_end, epoch_seconds());
  if (batch.problems.empty() && batch.points.empty()) return;
  const std::optional<TrialRow> trial = store_.trial(trial_id);
  if (!trial) return;
  if (!batch.problems.empty() && told < kProblemEvents) {
    std::string message = batch.problems.front();
    if (batch.problems.size() > 1) message += " (and " + std::to_string(batch.problems.size() - 1) + " more)";
    event(trial->experiment_id, trial_id, "metrics_skipped", message);
    log("trial " + std::to_string(trial_id) + ": " + message);
  }
  if (batch.points.empty()) return;
  try {
    store_.insert_metrics(trial_id, batch.points);
  } catch (...) {
    // Not stored: the file is read again from its start at the next pass (the store keeps one
    // point per step, so what was stored before is not doubled).
    followers_.erase(trial_id);
    throw;
  }
  if (options_.metrics) options_.metrics->report(trial_id, batch.points);
  // An attempt that has ended is past stopping: its last points are stored only.
  if (at_end) return;
  std::string objective;
  {
    std::lock_guard lock(shared_mu_);
    objective = objective_metric_[trial->experiment_id];
  }
  for (const MetricPoint& p : batch.points)
    if (p.name == objective && p.step > judged_through && std::isfinite(p.value)) early_stop_check(trial_id, p.step, p.value);
}

std::string Scheduler::skipped_lines_note(int64_t trial_id) const {
  auto it = followers_.find(trial_id);
  if (it == followers_.end() || it->second.file.problems() == 0) return "";
  return "; " + std::to_string(it->second.file.problems()) +
         " line(s) or value(s) of metrics.jsonl skipped, the first: " + it->second.file.first_problem();
}

std::string Scheduler::objective_missing(const TrialRow& trial, const ExperimentRow* exp) const {
  const std::string objective = exp ? exp->objective_metric : "val_loss";
  if (store_.last_metric(trial.id, objective)) return "";
  std::string reported;
  for (const std::string& name : store_.metric_names(trial.id)) reported += (reported.empty() ? "" : ", ") + name;
  return "the program exited 0 but never reported the objective " + objective + " (" +
         (reported.empty() ? std::string("it reported no metric") : "it reported " + reported) +
         "): append lines {\"step\": N, \"" + objective + "\": value} to $PRECON_RUN_DIR/metrics.jsonl, use the "
         "report API, or set objective.metric";
}

}  // namespace precon::orch

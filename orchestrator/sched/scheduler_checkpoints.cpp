// Checkpoint bookkeeping: the checkpoints a trial's workers write and delete, recorded in the
// store with the objective each was ranked by.
#include "orchestrator/sched/scheduler.h"

#include <cmath>
#include <set>

#include "orchestrator/sched/scheduler_live.h"
#include "worker/ckpt/checkpoint.h"
#include "worker/ckpt/objective.h"

namespace precon::orch {


namespace fs = std::filesystem;

void Scheduler::scan_checkpoints() {
  // Running trials write and delete checkpoints as they go; record them every few seconds so
  // the store sees each one (and its deletion) even when it lives shorter than the attempt.
  const auto now = std::chrono::steady_clock::now();
  for (auto& [trial_id, live] : live_) {
    if (now - live->checkpoints_scanned < std::chrono::seconds(2)) continue;
    live->checkpoints_scanned = now;
    if (auto trial = store_.trial(trial_id)) record_checkpoints(*trial);
  }
}

void Scheduler::record_checkpoints(const TrialRow& trial) {
  if (trial.run_dir.empty() || !fs::exists(fs::path(trial.run_dir) / "checkpoints")) return;
  std::vector<CheckpointRow> known = store_.checkpoints(trial.id);
  std::set<int64_t> on_disk;
  auto exp = store_.experiment(trial.experiment_id);
  for (const auto& info : worker::list_checkpoints(trial.run_dir)) {
    on_disk.insert(info.step);
    bool seen = false;
    for (const CheckpointRow& c : known) seen |= c.step == info.step;
    if (seen) continue;
    CheckpointRow c;
    c.trial_id = trial.id;
    c.step = info.step;
    c.path = info.dir.string();
    c.created_at = epoch_seconds();
    // The worker records the objective it ranked the checkpoint by (keep_best); older
    // checkpoints without it take the stored metric at or before their step.
    std::optional<double> objective = worker::checkpoint_objective(info.dir);
    if (!objective && exp) {
      if (auto m = store_.metric_at_or_before(trial.id, exp->objective_metric, info.step)) objective = m->value;
    }
    c.objective = objective.value_or(NAN);
    store_.add_checkpoint(c);
  }
  // The worker applies keep_checkpoints and keep_best; record what it deleted.
  for (const CheckpointRow& c : known)
    if (c.deleted_at == 0 && !on_disk.count(c.step)) store_.mark_checkpoint_deleted(c.id, epoch_seconds());
}

}  // namespace precon::orch

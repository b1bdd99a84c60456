// The `slurm` executor: each attempt is a run of a batch job submitted with `sbatch`; a sweep's
// ready trials with identical resources go in as one job array throttled to the experiment's
// max_concurrent (`--array=0-N%K`), others as one job each. The controller runs on a login node;
// run directories must be on a filesystem the compute nodes share, and `sbatch`, `squeue`,
// `scontrol` and `scancel` must be on PATH (`sacct` is used when accounting is configured).
//
// How an attempt's end is learnt. The batch script (slurm_script.h) writes
// run_dir/exit_status.<attempt> when the trainer exits; that file is the source of truth, and it
// survives the controller. Slurm's own state fills in what the script cannot say (cancelled,
// timed out, node failure, out of memory, preempted) from one `squeue` call per poll for all of
// precon's jobs, then `scontrol show job -o` (exit code, restart count) for the few jobs whose
// state changed, and `sacct -P` for jobs Slurm's controller has already forgotten.
//
// Requeues. A job that Slurm restarts (the script's own `scontrol requeue` after a time-limit
// warning or preemption notice, or Slurm requeueing it) keeps its job id; each run is a new
// attempt: poll() reports the run that ended as `requeue` with `continues` set, and from then on
// the same job id is attempt + 1 (attempt = submitted attempt + SLURM_RESTART_COUNT).
// run_dir/slurm_job.<job id> records the submitted attempt so that adopt() can rebuild that
// numbering after a controller restart, and so that a controller that died between sbatch and
// recording the attempt, asked after its restart to launch the same attempt, takes that job
// over instead of submitting a second one.
//
// Thread-safety: every method may be called from any thread (one mutex; Slurm commands run
// while it is held, so calls are serialised).
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "orchestrator/exec/executor.h"
#include "orchestrator/exec/slurm_command.h"
#include "orchestrator/exec/slurm_script.h"
#include "orchestrator/exec/slurm_state.h"

namespace precon::orch {

struct SlurmExecutorOptions {
  SlurmScriptOptions script;                        // signal lead time, requeue limit
  std::chrono::milliseconds poll_interval{2000};    // at most one squeue per this interval
  std::chrono::milliseconds command_timeout{30000}; // a Slurm command that takes longer is killed
  std::string sbatch = "sbatch", squeue = "squeue", scontrol = "scontrol", scancel = "scancel", sacct = "sacct";
};

class SlurmExecutor : public Executor {
 public:
  explicit SlurmExecutor(SlurmExecutorOptions options = {});
  ~SlurmExecutor() override;  // leaves jobs in Slurm: a restarted controller adopts them
  SlurmExecutor(const SlurmExecutor&) = delete;
  SlurmExecutor& operator=(const SlurmExecutor&) = delete;

  // True when `sbatch` is found on PATH.
  static bool available();

  std::string name() const override { return "slurm"; }
  void validate(const LaunchSpec& spec) const override;
  bool has_capacity(const LaunchSpec&) const override { return true; }  // Slurm queues
  Handle launch(const LaunchSpec& spec) override;
  std::vector<std::pair<Handle, ExitStatus>> poll() override;
  void signal_stop(const Handle& h) override;
  void kill(const Handle& h) override;
  std::optional<ExitStatus> adopt(const Handle& h) override;
  size_t running() const override;
  bool batches() const override { return true; }
  std::vector<BatchResult> launch_batch(const std::vector<LaunchSpec>& specs, int max_concurrent) override;
  std::vector<std::pair<Handle, std::string>> state_changes() override;

 private:
  struct Job {
    Handle handle;             // the current attempt
    int64_t base_attempt = 0;  // attempt number of the job's first run
    std::string state, reason;
    bool seen_running = false;
    bool cancelled = false;    // scancel sent
    int64_t pending_limit = 0;  // seconds it may wait before its first run (resources.pending_limit); 0 = any
    double submitted_at = 0;    // wall-clock seconds of the sbatch, from its run_dir/slurm_job.<id> record,
                                // or of the end of its wait behind its own array's throttle
    bool throttled = false;     // last seen PENDING (JobArrayTaskLimit): waiting for its siblings
  };
  struct Decision {
    bool report = false;
    ExitStatus status;
  };

  std::string submit(const std::filesystem::path& script);  // job id, or throws ExecError
  void track(const Handle& h, int64_t base_attempt, int64_t pending_limit, double submitted_at);
  // The job an earlier controller submitted for this attempt (its run_dir/slurm_job.<id> record
  // names the attempt), or nullopt.
  std::optional<Handle> earlier_job(const LaunchSpec& spec) const;
  Decision judge(Job& job, const SqueueRow* row);
  // Restart count and final fields of a job from scontrol, or sacct when scontrol forgot it.
  std::map<std::string, std::string> job_record(const std::string& id);
  CommandResult run(const std::vector<std::string>& argv) const;
  void cancel(const Handle& h);

  SlurmExecutorOptions options_;
  mutable std::mutex mu_;
  std::vector<Job> jobs_;
  std::vector<std::pair<Handle, std::string>> changes_;  // since the last state_changes()
  std::chrono::steady_clock::time_point last_poll_{};
};

}  // namespace precon::orch

// The interface between the scheduler and the machines that run workers: `local` (child
// processes on this machine) and `slurm` (batch jobs). An executor launches one attempt of a
// trial, reports attempts that ended, delivers stop/kill, and re-attaches to attempts after a
// controller restart, so that every attempt's end is reported exactly once.
// Thread-safety: implementations are safe to call from any thread; the scheduler calls them
// from its strand.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "worker/config/config.h"

namespace precon::orch {

// A launch failed, or a request can never be met by this executor. The message says what
// to change.
class ExecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The executor's service cannot be reached now (slurmctld down or not answering): nothing was
// started, and the same launch can be tried again later.
class ExecUnavailable : public ExecError {
 public:
  using ExecError::ExecError;
};

// One attempt to run: the program, its environment and the resources it needs.
struct LaunchSpec {
  int64_t trial_id = 0;
  int64_t attempt = 0;                     // 1-based per trial
  std::string label;                       // human-readable name (job name on Slurm)
  std::filesystem::path run_dir;           // created if absent; logs and exit status go here
  std::vector<std::string> argv;           // argv[0] = program path
  // A recipe's [trial] command rather than precon-train: it runs in `run_dir`, and a bare program
  // name is looked up on the PATH where it runs. precon-train runs in the controller's directory.
  bool user_program = false;
  std::map<std::string, std::string> env;  // added to the controller's environment
  int cpus = 1;                            // CPU slots of one rank (also its OMP_NUM_THREADS)
  int gpus = 0;                            // GPU slots
  int ranks = 1;                           // processes of the trial (parallel.tensor × parallel.data × parallel.pipeline):
                                           // started by mpirun locally, by srun on Slurm
  int total_cpus() const { return cpus * ranks; }
  worker::ResourcesConfig resources;       // the trial's [resources] (nodes, partition, ... for Slurm)
};

// How an attempt ended, in the terms the scheduler decides on.
enum class ExitKind {
  succeeded,  // exit 0
  failed,     // another nonzero exit: retry from the last checkpoint while attempts remain
  usage,      // exit 2, bad command line or config: retrying will not help
  requeue,    // exit 75, checkpoint written after SIGUSR1/SIGTERM: relaunch, not a failure
  killed,     // ended by a signal
  out_of_memory,  // killed by the out-of-memory killer (or Slurm OUT_OF_MEMORY): not retried
  lost,       // gone, and how it ended cannot be known
};

struct ExitStatus {
  ExitKind kind = ExitKind::lost;
  int code = -1;       // exit code, or -1 when it did not exit normally
  int signal = 0;      // terminating signal, or 0
  std::string detail;  // for people: "exit code 1", "killed by SIGKILL", ...
  // With kind == requeue: the executor already restarts the same job (Slurm requeued it), so
  // the next attempt is `attempt + 1` under the same external id; poll() reports its end.
  bool continues = false;
};

// Maps a wait status (waitpid) of precon-train to an ExitStatus using its exit-code contract
// (worker/train/exit_codes.h).
ExitStatus classify_exit(int wait_status);

// An attempt whose end cannot be known, with the reason for people.
ExitStatus lost(std::string detail);

// Where every executor sends the trainer's stderr: one file in the run directory that each
// attempt of the trial appends to.
std::filesystem::path trainer_stderr_path(const std::filesystem::path& run_dir);

// The trainer's own account of a failure: the message of the last "precon-train: config error:
// MSG" or "precon-train: error: MSG" line (worker/main.cpp writes one before exiting nonzero) at
// or after byte `from` of the run directory's trainer stderr, or "" when there is none.
std::string trainer_error_message(const std::filesystem::path& run_dir, uintmax_t from = 0);

// A recipe's own program's account of a failure: the last line it wrote to the run directory's
// stderr log at or after byte `from` (a launcher's own lines, srun's and mpirun's, aside), trimmed
// and cut to 300 characters; "" when there is none.
std::string program_last_words(const std::filesystem::path& run_dir, uintmax_t from = 0);

// Which rank of a multi-rank attempt died of which signal, from the launcher's lines in the
// trainer's stderr log at or after byte `from`: mpirun's "process rank 1 with PID ... on node n1
// exited on signal 9 (Killed)" and srun's "srun: error: n1: task 1: Killed" give "rank 1 (on n1)
// killed by SIGKILL (signal 9)", several joined by "; "; "" when the launcher said none.
std::string launcher_rank_deaths(const std::filesystem::path& run_dir, uintmax_t from = 0);

// Names one launched attempt. Everything in it is persisted by the scheduler (attempts row and
// the trial's run_dir), so that after a restart it can rebuild the Handle and adopt() it.
struct Handle {
  std::string executor;           // "local" | "slurm"
  std::string external_id;        // local: "<pid>:<start time in clock ticks>"; slurm: job id
  std::string nodes;              // host name(s) it runs on
  int64_t trial_id = 0;           // from the LaunchSpec
  int64_t attempt = 0;            // from the LaunchSpec
  std::filesystem::path run_dir;  // from the LaunchSpec; the exit-status file lives here
};

class Executor {
 public:
  virtual ~Executor();

  virtual std::string name() const = 0;

  // Throws ExecError when the spec can never run here (more slots than exist, no program).
  virtual void validate(const LaunchSpec& spec) const = 0;

  // True when the slots the spec needs are free now.
  virtual bool has_capacity(const LaunchSpec& spec) const = 0;

  // Starts the attempt (validate() first); throws ExecError with a clear message.
  virtual Handle launch(const LaunchSpec& spec) = 0;

  // Attempts that ended since the last poll, each reported once. Never blocks.
  virtual std::vector<std::pair<Handle, ExitStatus>> poll() = 0;

  // Asks the attempt to stop: SIGTERM to its processes; precon-train checkpoints and exits 75.
  // No-op for an attempt that already ended.
  virtual void signal_stop(const Handle& h) = 0;

  // Ends the attempt now (SIGKILL to every process of it). No-op if it already ended.
  virtual void kill(const Handle& h) = 0;

  // After a controller restart: re-attach to the attempt. Returns nullopt when it still runs
  // (poll() reports its end later), or its final status now when it already ended (recovered,
  // or `lost` when that cannot be known).
  virtual std::optional<ExitStatus> adopt(const Handle& h) = 0;

  // Attempts launched or adopted and not yet reported by poll().
  virtual size_t running() const = 0;

  // What changed about running attempts since the last call, for people ("Slurm PENDING
  // (Resources)", "Slurm RUNNING on n1"); a handle's `nodes` is filled in once known.
  virtual std::vector<std::pair<Handle, std::string>> state_changes() { return {}; }

  // True when this executor prefers all ready trials of an experiment in one launch_batch()
  // call (Slurm job arrays), throttled by the executor rather than by the scheduler.
  virtual bool batches() const { return false; }

  // Starts several attempts at once, at most `max_concurrent` of them running at a time when
  // the executor can enforce that. One result per spec, in order: a handle, or the error that
  // kept that spec from starting. The default launches one by one.
  struct BatchResult {
    std::optional<Handle> handle;
    std::string error;
    bool retry_later = false;  // the error was ExecUnavailable: nothing started, try again later
  };
  virtual std::vector<BatchResult> launch_batch(const std::vector<LaunchSpec>& specs, int max_concurrent);
};

}  // namespace precon::orch

// The batch scripts the Slurm executor submits, and the validation that makes them safe: every
// value from a recipe that reaches a script is either checked against a strict pattern (sbatch
// options, which sbatch itself parses) or single-quoted for the shell (paths, argv, environment).
// `resources.setup` lines are the one exception by design: they are shell commands the recipe's
// author asked for (module loads); they are checked to be single lines and written verbatim.
//
// A trial script (run_dir/slurm-<attempt>.sh, kept for the user to read and resubmit) runs the
// trainer's ranks with `srun`, forwards SIGUSR1/SIGTERM to them, records the exit status in
// run_dir/exit_status.<attempt> (attempt = the submitted attempt + SLURM_RESTART_COUNT) and, when
// the trainer exits with its requeue code after a SIGUSR1 (time-limit warning, preemption notice),
// requeues the job with `scontrol requeue` while requeues remain. A stop signal that arrives
// before the trainer starts (during `resources.setup`) reaches it as PRECON_STOP_SIGNAL in its
// environment instead: a signal sent while srun or the trainer starts up would kill them. A job
// array script dispatches each task to its trial's script.
//
// The trial's report token (PRECON_TRIAL_TOKEN in the spec's environment) is never written into
// the script, which other users of the cluster may read: the executor writes it to an owner-only
// file (slurm_token_path) that the script reads when the job starts.
// Thread-safety: free functions without shared state.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "orchestrator/exec/executor.h"

namespace precon::orch {

// The environment variable that carries a trial's report token.
inline constexpr const char* kTrialTokenEnv = "PRECON_TRIAL_TOKEN";

struct SlurmScriptOptions {
  int signal_lead_s = 120;   // --signal=B:USR1@N: warning before the time limit
  int max_requeues = 20;     // self-requeues per job; after that the executor submits anew
  std::string srun = "srun";
  std::string scontrol = "scontrol";
};

// `'...'` with every `'` written as `'\''`. Throws ExecError for a NUL byte.
std::string shell_quote(const std::string& s);

// The job name for a label: "precon-" + the label with anything but [A-Za-z0-9_.-] as '_'.
std::string slurm_job_name(const std::string& label);

// Throws ExecError naming the key and what is allowed, for anything that could not be written
// into a script safely or that sbatch would reject (bad time/memory syntax, hostile characters,
// options precon sets itself in sbatch_args, multi-line setup).
void validate_slurm_spec(const LaunchSpec& spec);

// The sbatch options for a trial, one per element ("--nodes=2"), without the array option.
std::vector<std::string> slurm_options(const LaunchSpec& spec, const SlurmScriptOptions& options);

// True when two specs can share one job array (same options apart from name and output).
bool same_slurm_resources(const LaunchSpec& a, const LaunchSpec& b);

// Where the trial script of an attempt is written.
std::filesystem::path slurm_script_path(const std::filesystem::path& run_dir, int64_t attempt);

// Where the report token of a submitted attempt is kept (mode 0600) for its script to read.
std::filesystem::path slurm_token_path(const std::filesystem::path& run_dir, int64_t attempt);

// The trial script (validate_slurm_spec first).
std::string trial_script(const LaunchSpec& spec, const SlurmScriptOptions& options);

// One job array for `specs` (same resources), task i running `scripts[i]` with its output
// appended to the trial's run directory; at most `max_concurrent` tasks run at once (0 = no
// throttle). `output` receives what the dispatcher itself prints.
std::string array_script(const std::vector<LaunchSpec>& specs, const std::vector<std::filesystem::path>& scripts,
                         int max_concurrent, const std::filesystem::path& output, const SlurmScriptOptions& options);

}  // namespace precon::orch

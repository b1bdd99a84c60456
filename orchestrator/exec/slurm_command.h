// Running the Slurm client commands (sbatch, squeue, scontrol, scancel, sacct) without a shell:
// argv goes to execvp as is, stdout and stderr are captured, and a command that hangs (an
// unreachable slurmctld) is killed after a timeout.
// Thread-safety: free functions without shared state; safe from any thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace precon::orch {

struct CommandResult {
  int exit_code = -1;    // -1 when it did not exit normally (signal, timeout, could not start)
  std::string out, err;  // captured stdout and stderr
  std::string error;     // why it did not run or finish ("timed out after 30 s", "not found")
  bool ok() const { return exit_code == 0; }
  // "sbatch: error: ..." (stderr, else the error, else the exit code), on one line.
  std::string message() const;
};

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace precon::orch

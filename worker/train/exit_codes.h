// Exit codes of precon-train, the contract with the executors (local and Slurm).
#pragma once

namespace precon::worker {

constexpr int kExitOk = 0;          // trained to the last step, or stopped on the controller's request
constexpr int kExitFailed = 1;      // training failed (non-finite loss, optimizer error, I/O error, ...)
constexpr int kExitUsage = 2;       // bad command line or configuration: retrying will not help
constexpr int kExitRequeue = 75;    // SIGUSR1/SIGTERM: checkpoint written, requeue me (EX_TEMPFAIL)

}  // namespace precon::worker

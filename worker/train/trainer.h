// The training loop of one run: config -> model, optimizer, data -> steps, evaluation,
// checkpoints, metrics, reports, signals. Library code: errors are exceptions; precon-train's
// main maps the outcome and the errors to exit codes (exit_codes.h).
#pragma once

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/common/error.h"
#include "worker/config/config.h"
#include "worker/parallel/communicator.h"

namespace precon::worker {

struct TrainOptions {
  std::filesystem::path config_path;   // trial TOML (recipe schema without [sweep])
  std::vector<std::string> overrides;  // --set key=value
  std::filesystem::path run_dir;       // checkpoints/, metrics.jsonl, config.toml
  std::string report_url;              // controller report endpoint; empty = no reporting
  std::string token;                   // bearer token for report_url
  std::string trial_id;                // trial id sent with reports
  std::string resume = "auto";         // "auto" (newest good checkpoint), "never", or a checkpoint dir
  int64_t stop_at_step = 0;            // checkpoint and return requeue after this step; 0 = never
  std::function<void(const std::string&)> log;  // progress and warnings; default: stderr
  // The job's ranks (mpirun/srun started several); null = this process alone. Its size must be
  // parallel.tensor × parallel.data.
  Communicator* world = nullptr;
};

enum class TrainOutcome {
  completed,  // reached train.steps
  stopped,    // the controller asked to stop (early stopping, cancel); checkpoint written
  requeue,    // SIGUSR1/SIGTERM received; checkpoint written; run again to resume
};

// The run cannot continue: non-finite loss, too many failed inverse roots, ... The message says
// what happened, at which step, and which checkpoint is the last good one.
class TrainingError : public WorkerError {
 public:
  using WorkerError::WorkerError;
};

TrainOutcome train(const TrainOptions& options);

// Installs SIGUSR1/SIGTERM handlers that make train() checkpoint at the next step boundary and
// return TrainOutcome::requeue. PRECON_STOP_SIGNAL=USR1 or TERM in the environment counts as
// that signal received at start (the Slurm batch script passes on a stop that arrived before
// the trainer ran). Called by main; tests may call it too.
void install_requeue_signal_handlers();
bool requeue_signal_received();
void reset_requeue_signal();

}  // namespace precon::worker

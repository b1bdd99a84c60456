// Inside the scheduler: the runtime state of a trial with an open attempt, shared by the files
// the Scheduler class is split into (scheduler.cpp: thread, submit, cancel, reports;
// scheduler_launch.cpp; scheduler_outcome.cpp; scheduler_checkpoints.cpp; scheduler_stops.cpp;
// scheduler_reconcile.cpp). Only those files include it; everything here lives on the strand.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "orchestrator/common/clock.h"
#include "orchestrator/sched/scheduler.h"

namespace precon::orch {

struct Scheduler::Live {
  int64_t attempt_id = 0;
  Handle handle;
  Executor* executor = nullptr;
  bool stop_requested = false;
  TrialState stop_state = TrialState::cancelled;
  std::string stop_reason;
  std::chrono::steady_clock::time_point stop_at;
  bool sigterm_sent = false;
  bool sigkill_sent = false;
  std::chrono::steady_clock::time_point checkpoints_scanned{};  // last record_checkpoints()
  int64_t start_step = -1;  // the trial's last_step when this attempt was launched; -1 = adopted
  // Size of the trainer's stderr log when this attempt was launched: its own lines start there
  // (0 when adopted: the whole log is searched).
  uintmax_t stderr_offset = 0;
  // A recipe's own program (LaunchSpec::user_program): it reports through metrics.jsonl, which the
  // scheduler follows, and hears a stop by SIGTERM only.
  bool user_program = false;
};

namespace sched_detail {

// The size of the trial's trainer stderr log: where the next attempt's lines will start.
uintmax_t stderr_size(const std::string& run_dir);

}  // namespace sched_detail

}  // namespace precon::orch

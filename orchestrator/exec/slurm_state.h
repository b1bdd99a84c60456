// Reading Slurm's answers: `squeue -h -r -o '%i|%T|%r|%N'` lines, `scontrol show job -o` records,
// `sacct -P` tables, and mapping every Slurm job state to how an attempt ended.
// Thread-safety: free functions without shared state.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "orchestrator/exec/executor.h"

namespace precon::orch {

// The squeue output format these parsers expect, and one parsed line.
inline constexpr const char* kSqueueFormat = "%i|%T|%r|%N";
struct SqueueRow {
  std::string state;   // PENDING, RUNNING, ...
  std::string reason;  // None, Priority, Resources, BeginTime, ...
  std::string nodes;   // every node once running, comma-separated ("n1,n2", not "n[1-2]")
};
// Job id ("123", or "123_4" for an array task) -> row. Malformed lines are skipped.
std::map<std::string, SqueueRow> parse_squeue(const std::string& text);

// A Slurm host list written out node by node: "n[1-3,7],gpu05" -> "n1,n2,n3,n7,gpu05"; ranges
// keep their zero padding ("a[08-10]" -> "a08,a09,a10"). Text that is not a host list, or one of
// more than 10000 nodes, comes back as it is.
std::string expand_hostlist(const std::string& list);

// `scontrol show job -o` (one job per line, `Key=Value` separated by blanks; a value may hold
// blanks). Returns the first record's keys. Empty when the text holds no record.
std::map<std::string, std::string> parse_scontrol_record(const std::string& text);

// `sacct -P -n -o JobID,State,ExitCode[,...]` (the job's own line, not its steps). nullopt
// when the job is not in the table.
struct SacctRow {
  std::string state, exit_code;
  int restarts = 0;  // a fourth column when present
};
std::optional<SacctRow> parse_sacct(const std::string& text, const std::string& job_id);

// "CANCELLED by 0" -> "CANCELLED"; "RUNNING" stays.
std::string base_state(const std::string& state);

// True while the job may still run (pending, running, completing, requeued, held, suspended ...).
bool slurm_state_active(const std::string& state);
// True for states in which a requeued job waits for its next run.
bool slurm_state_waiting(const std::string& state);

// A Slurm time ("M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S") in seconds; 0 for "",
// "INFINITE" and "UNLIMITED"; nullopt for anything else.
std::optional<int64_t> slurm_time_seconds(const std::string& text);

// How an attempt ended when Slurm reports the job in a final state with ExitCode "rc:signal":
// COMPLETED/FAILED by exit code (75 = requeue), CANCELLED = killed, TIMEOUT = failed (no
// checkpoint was written on the way out), NODE_FAIL/BOOT_FAIL = lost, OUT_OF_MEMORY = out_of_memory (not retried),
// PREEMPTED = requeue (resumes, not a failure), DEADLINE = failed, anything else = lost.
ExitStatus slurm_exit_status(const std::string& state, const std::string& exit_code, const std::string& reason);

}  // namespace precon::orch

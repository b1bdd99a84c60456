// Test-only fault hook for the fault-injection suite (tests/faults): with
// PRECON_FAULT_KILL_AT=PHASE:STEP[:N] in the environment the process SIGKILLs itself at one point
// of the run, as a crash or `kill -9` there would end it:
//   step:S      after step S was trained and its metrics emitted, before evaluation or checkpoint
//   ckpt:S:N    inside the checkpoint of step S, after N of its files were written (before the
//               manifest and the rename)
//   report:S    once the controller has acknowledged a metric batch holding step S or later,
//               before the answer is acted on
//   alltoall:S  inside the S-th expert-parallel all-to-all of a mixture-of-experts layer (each
//               layer counts its own), while the peers wait in it
// Unset (the normal case) or another phase: no effect. With PRECON_FAULT_KILL_RANK=R as well,
// only the rank R of a multi-rank job (OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMIX_RANK) dies there.
// Thread-safety: reads the environment only.
#pragma once

#include <signal.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace precon::worker {

struct FaultPoint {
  int64_t step = -1;  // -1: no fault in this phase
  int64_t count = 0;  // N of ckpt:S:N
};

// Whether the fault is this process's: every rank's unless PRECON_FAULT_KILL_RANK names another.
inline bool fault_rank_matches() {
  const char* want = std::getenv("PRECON_FAULT_KILL_RANK");
  if (want == nullptr) return true;
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMIX_RANK"})
    if (const char* rank = std::getenv(name)) return std::string(rank) == want;
  return std::string(want) == "0";  // one process is rank 0
}

inline FaultPoint fault_point(const std::string& phase) {
  const char* v = std::getenv("PRECON_FAULT_KILL_AT");
  if (v == nullptr || !fault_rank_matches()) return {};
  const std::string s = v;
  if (s.rfind(phase + ":", 0) != 0) return {};
  FaultPoint p;
  char* end = nullptr;
  p.step = std::strtoll(s.c_str() + phase.size() + 1, &end, 10);
  if (end != nullptr && *end == ':') p.count = std::strtoll(end + 1, nullptr, 10);
  return p;
}

[[noreturn]] inline void fault_kill() {
  ::raise(SIGKILL);
  std::abort();
}

}  // namespace precon::worker

// Telling an out-of-memory kill from any other SIGKILL, for the local executor. The evidence, in
// order: the memory cgroup's own count of the kills its out-of-memory killer made (v2
// memory.events oom_kill, v1 memory.oom_control oom_kill) rising while the attempt ran; the
// kernel's record in /dev/kmsg naming the program's pid ("Out of memory: Killed process PID",
// "oom-kill:...,pid=PID,"), where this process may read it; else a SIGKILL whose peak resident
// memory came within 10 % of the limit (the cgroup's, or the machine's memory). Such an attempt
// fails with a reason that says so, and is not retried: the same run would be killed again.
// Thread-safety: free functions without shared state.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "orchestrator/exec/executor.h"

namespace precon::orch {

// This process's memory cgroup (v2 first, else v1's memory controller) and what it says now.
struct MemoryCgroupView {
  std::string dir;        // /sys/fs/cgroup/... ; "" when there is none to read
  bool v2 = false;
  long long oom_kills = -1;  // -1: not counted here
  double limit = -1;         // bytes; -1: no limit
};
// root: a directory standing for "/" (tests); empty: the real one.
MemoryCgroupView own_memory_cgroup(const std::string& root = "");
// The cgroup's oom_kill count now; -1 when it cannot be read.
long long cgroup_oom_kills(const MemoryCgroupView& cgroup);

// The kernel's record of an out-of-memory kill of `pid` in /dev/kmsg (its text, trimmed), or ""
// when there is none or the log cannot be read (no permission, no /dev/kmsg in a container).
std::string kernel_oom_record(pid_t pid, const std::string& kmsg_path = "/dev/kmsg");

// What the executor knows of an attempt that ended.
struct OomEvidence {
  ExitStatus status;            // as the wrapper recorded it
  long long oom_kills_before = -1, oom_kills_after = -1;  // the cgroup's count at launch and at the end
  std::string kernel_record;    // kernel_oom_record() of the program's pid
  double peak_rss = -1;         // bytes (wait4's ru_maxrss); -1 unknown
  double limit = -1;            // bytes: the cgroup's limit, else the machine's memory; -1 unknown
  std::string limit_source;     // "cgroup memory.max", "the machine's memory"
};

// The status to report: `evidence.status` unchanged when nothing says the out-of-memory killer
// ended it; else kind out_of_memory and a detail starting "killed by the out-of-memory killer",
// with the peak resident memory, the limit and the evidence.
ExitStatus judge_oom(const OomEvidence& evidence);

// /proc/meminfo MemTotal in bytes, -1 when unreadable.
double memory_total_bytes();

}  // namespace precon::orch

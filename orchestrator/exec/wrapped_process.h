// Starting a program under the exit-status wrapper (see local_executor.h), and reading back
// what it leaves: /proc start times and exit-status files. Used by the local executor.
// Thread-safety: free functions without shared state; spawn_wrapped may be called from any
// thread of a multi-threaded process.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/exec/executor.h"

namespace precon::orch {

struct WrappedCommand {
  std::string exe;                              // resolved path of the program (execve does not search PATH)
  std::vector<std::string> argv;                // argv[0] included
  std::vector<std::string> env;                 // the whole environment, "KEY=value"
  std::filesystem::path stdout_path;            // appended, created if absent
  std::filesystem::path stderr_path;            // appended, created if absent
  std::filesystem::path status_path;            // "exit N\n" or "signal N\n" when the program ends, then
                                                // "pid P\nmaxrss_kib K\n" (its peak resident memory)
  std::filesystem::path workdir;                // the program's working directory; "" = the caller's
  // When set, the wrapper appends "wrapper=<pid>:<start ticks>\n" here before it starts the
  // program, so whoever finds the program running can tell which process runs it even when
  // the caller died before it learnt the pid.
  std::filesystem::path identity_path;
};

// Forks the wrapper, which leads a new process group (pgid = its pid), runs the program with
// stdin from /dev/null (in `workdir` when given: a program that cannot enter it exits 127, the
// reason in its stderr) and records its status; returns the wrapper's pid. Throws ExecError.
pid_t spawn_wrapped(const WrappedCommand& cmd);

// /proc/<pid>/stat: field 3 (state: R, S, Z, ...) and field 22 (start time in clock ticks
// since boot, which with the pid names one process for good). nullopt when there is none.
struct ProcStat {
  char state = '?';
  unsigned long long start_ticks = 0;
};
std::optional<ProcStat> read_proc_stat(pid_t pid);

// The status a wrapper wrote, classified; nullopt when the file is absent or unreadable. With
// `record`, also the program's pid and peak resident memory, where the wrapper wrote them.
struct ExitRecord {
  pid_t pid = 0;
  double peak_rss = -1;  // bytes
};
std::optional<ExitStatus> read_exit_status_file(const std::filesystem::path& path, ExitRecord* record = nullptr);

// A program name resolved as a shell would with `path_var`; a name with a '/' is checked as is.
std::optional<std::string> resolve_program(const std::string& name, const std::string& path_var);

}  // namespace precon::orch
